"""``export --wandb`` writes inside ``--out`` alone: W&B's service logs (``core-debug-*``,
``symon-debug-*``) and its artifact staging went to ``~/.cache/wandb`` and
``~/.local/share/wandb`` on every export (session 33's audit). They now go under
``--out``/wandb, unless the user set ``WANDB_CACHE_DIR`` / ``WANDB_DATA_DIR``.

    pytest tests/test_export_s33_wandb_place.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app


@pytest.mark.slow  # wandb starts its core process
def test_a_wandb_export_writes_nothing_outside_its_out_folder(
    tmp_path: Path, make_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    home = tmp_path / "home"
    home.mkdir()
    for var in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()) if var != "HOME" else str(home))
    monkeypatch.delenv("WANDB_CACHE_DIR", raising=False)
    monkeypatch.delenv("WANDB_DATA_DIR", raising=False)
    run = make_run(tmp_path / "run")
    out = tmp_path / "wb"
    res = CliRunner().invoke(app, ["export", str(run), "--wandb", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [p for p in home.rglob("*") if p.is_file()] == []
    assert list(out.glob("wandb/logs/core-debug-*.log"))  # W&B's own log, kept with the runs


@pytest.mark.slow  # a fresh interpreter: W&B records sys.argv, which CliRunner leaves alone
def test_a_run_folder_named_in_undecodable_bytes_exports_to_wandb(tmp_path: Path, make_run) -> None:
    pytest.importorskip("wandb")
    import os
    import subprocess
    import sys

    run = make_run(tmp_path / "run")
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff\xfename")
    os.rename(run, odd)
    out = tmp_path / "wb"
    env = {**os.environ, "WANDB_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300",
           "WANDB_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "export", odd, "--wandb",
                          "--out", str(out)], env=env, capture_output=True, timeout=300)  # fmt: skip
    said = res.stdout.decode("utf-8", "replace") + res.stderr.decode("utf-8", "replace")
    assert res.returncode == 0, said
    assert "-> bad\ufffd\ufffdname (offline)" in said, said
    assert len(list(out.glob("wandb/offline-run-*/run-*.wandb"))) == 1
