"""Bad input to bench-train, bench-kernels and accum-check: one ``error:`` line, a non-zero
exit, nothing written in a run folder given (or reached through a link) as ``--out``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app

COMMANDS = {
    "bench-train": ["bench-train", "--device", "cpu", "--updates", "1", "--warmup", "0"],
    "bench-kernels": ["bench-kernels", "--device", "cpu", "--sizes", "tiny", "--reps", "1"],
    "accum-check": ["accum-check", "--device", "cpu"],
}


def _run(tmp_path: Path, args: list[str]) -> tuple[int, list[str], object]:
    res = CliRunner().invoke(app, args)
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    return res.exit_code, errors, res.exception


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _make_run(root: Path, marks: tuple[str, ...]) -> Path:
    root.mkdir()
    for name in marks:
        (root / name).write_text("{}\n")
    return root


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("marks", "below"),
    [(("config.json", "metrics.jsonl"), ""), (("cascade.json",), "sub/deeper"),
     (("sweep.json",), "cell")],
)  # fmt: skip
def test_out_in_a_run_is_one_line(tmp_path: Path, command: str, marks: tuple, below: str) -> None:
    """Before: the bench or check ran and wrote its JSON and page among the run's records."""
    run = _make_run(tmp_path / "run", marks)
    before = _files(tmp_path)
    out = run / below if below else run
    code, errors, exc = _run(tmp_path, [*COMMANDS[command], "--out", str(out)])
    assert code == 2 and isinstance(exc, SystemExit), exc
    assert len(errors) == 1 and "a run folder" in errors[0]
    assert _files(tmp_path) == before


def test_out_linked_to_a_run_is_one_line(tmp_path: Path) -> None:
    """Before: a link to a run was written through, into the run."""
    run = _make_run(tmp_path / "run", ("config.json", "metrics.jsonl"))
    (tmp_path / "link").symlink_to(run)
    before = _files(tmp_path)
    code, errors, _ = _run(tmp_path, [*COMMANDS["accum-check"], "--out", str(tmp_path / "link")])
    assert code == 2 and len(errors) == 1 and "a run folder" in errors[0]
    assert _files(tmp_path) == before


def test_a_folder_with_only_a_config_is_not_a_run(tmp_path: Path) -> None:
    """A project's own config.json (no metrics beside it) does not refuse --out below it."""
    from andrea_diag.bench.train_checks import check_out_outside_runs

    (tmp_path / "config.json").write_text("{}")
    check_out_outside_runs(tmp_path / "reports" / "bench")
