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
