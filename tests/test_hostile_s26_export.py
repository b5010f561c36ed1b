"""``export`` of runs some of which hold no metric row, and one refused midway into an --out the
user already had (round 26; ``tensorboard.runs_to_export``, ``commands/export.py``).

- A run with no readable metric row (killed before its first row, or every row torn) was left
  out of every export without a word: ``export --tensorboard A B`` wrote A alone and exited 0.
  It is still left out (the others are the user's export), and a warning names it.
- An export refused after it made the runs' folders, before a file was in them (a writer that
  cannot be made), inside an --out the user had left them there, empty; only an --out it made
  itself was cleaned. What a writer already wrote stays, as before.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hostile_dirs import cascade_fixture, cli, one_line_error  # noqa: F401 (cascade_fixture)

from andrea_diag.errors import UserError


def _no_rows(run: Path) -> None:
    (run / "metrics.parquet").unlink()
    (run / "metrics.jsonl").write_text('{"update": "x", "loss": [1\n')  # one torn row


def _writer() -> None:
    from andrea_diag.tensorboard import writer_backend

    try:
        writer_backend()
    except UserError:
        pytest.skip("no TensorBoard writer installed")


def test_a_run_without_metric_rows_is_named_when_the_export_leaves_it_out(
    cascade: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _writer()
    _no_rows(cascade / "none")
    out = tmp_path / "tb"
    with caplog.at_level(logging.WARNING):
        code, output = cli("export", "--tensorboard", str(cascade / "global"),
                           str(cascade / "none"), "--out", str(out))  # fmt: skip
    assert code == 0, output
    assert f"{cascade / 'none'}: no metric rows; not exported" in caplog.text, caplog.text
    assert list((out / "global").glob("events.out.tfevents.*"))
    assert not (out / "none").exists()


def test_every_back_end_names_the_run_it_leaves_out(
    cascade: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """W&B and MLflow go through export_to_sinks: a stub sink stands in for them."""
    from andrea_diag.sinks import export_to_sinks

    class Sink:
        def log(self, row: Any) -> None: ...
        def events(self, events: Any) -> None: ...
        def summary(self, summary: Any) -> None: ...
        def close(self) -> None: ...

    _no_rows(cascade / "none")
    with caplog.at_level(logging.WARNING):
        done = export_to_sinks([cascade], lambda name, config: Sink())
    assert [run.name for run, _ in done] == ["global"]
    assert f"{cascade / 'none'}: no metric rows; not exported" in caplog.text


def test_an_export_refused_after_making_the_runs_folders_leaves_the_users_out_as_it_was(
    cascade: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _writer()
    from andrea_diag import tensorboard

    def refuse(self: Any, *args: Any) -> None:
        raise UserError("the writer could not be made")

    monkeypatch.setattr(tensorboard.TensorBoardRun, "__init__", refuse)
    mine = tmp_path / "mine"
    (mine / "old").mkdir(parents=True)  # an empty folder of the user's own: never removed
    one_line_error("export", "--tensorboard", str(cascade), "--out", str(mine))
    assert sorted(p.name for p in mine.iterdir()) == ["old"]
