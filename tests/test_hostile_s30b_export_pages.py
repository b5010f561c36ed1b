"""``export`` into a run it reads, its store and project options, and pages written over things
that are not pages (round 30b; ``commands/export.py``, ``report/page_file.py``,
``tensorboard.md_cell``).

- ``export --tensorboard RUN --out RUN`` (or ``--out CASCADE`` with an arm given, whose
  TensorBoard folder is named after the arm), ``--wandb --out RUN`` and ``--mlflow RUN`` wrote
  event files, W&B's folder or a whole MLflow file store (``.trash``, ``0/meta.yaml``) among
  the run's records, exit 0. Refused in one line, the run left as it was; a folder beside the
  arms (in the cascade) is still fine.
- ``--mlflow`` with a control character made a store under that name; a newline in a
  ``file:`` URI was dropped (another folder). ``--project`` with a lone surrogate (a non-UTF-8
  argument) failed inside MLflow after its store was made and read as a damaged run.
- A FIFO or a folder at ``sweep.html``, ``ladder.html`` or the shared ``plotly.min.js`` was
  replaced without a word (a FIFO) or failed with the OS's words (a folder), where a run's own
  ``report.html`` was one line.
- An event's cause or metric with a line break or ``|`` broke TensorBoard's events table.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hostile_dirs import (  # noqa: F401 (cascade_fixture is the ``cascade`` fixture)
    XSS,
    cascade_fixture,
    cli,
    make_sweep,
    one_line_error,
)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _mlflow(store: str, cascade: Path) -> list[str]:
    pytest.importorskip("mlflow")
    return ["export", "--mlflow", store.format(c=cascade), str(cascade / "none")]


CASES = {
    "tb-out-run": lambda c: ["export", "--tensorboard", str(c / "none"), "--out", str(c / "none")],
    "tb-out-in-run": lambda c: ["export", "--tensorboard", str(c / "none"),
                                "--out", str(c / "none" / "tb")],
    "tb-arm-out-cascade": lambda c: ["export", "--tensorboard", str(c / "none"), "--out", str(c)],
    "wandb-out-run": lambda c: ["export", "--wandb", str(c / "none"), "--out", str(c / "none")],
    "mlflow-run": lambda c: _mlflow("{c}/none", c),
    "mlflow-in-run": lambda c: _mlflow("file:{c}/none/mlruns", c),
    "mlflow-sqlite-in-run": lambda c: _mlflow("sqlite:///{c}/none/mlflow.db", c),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_an_export_into_a_run_it_reads_is_one_line_and_the_run_is_left_as_it_was(
    cascade: Path, case: str
) -> None:
    if case.startswith("tb"):
        pytest.importorskip("tensorboardX")
    if case.startswith("wandb"):
        pytest.importorskip("wandb")
    before = _listing(cascade)
    line = one_line_error(*CASES[case](cascade))
    assert "a run this export reads" in line and str(cascade / "none") in line, line
    assert _listing(cascade) == before


def test_an_mlflow_store_linked_into_a_run_is_refused(cascade: Path, tmp_path: Path) -> None:
    (tmp_path / "store").symlink_to(cascade / "none")
    before = _listing(cascade)
    line = one_line_error(*_mlflow(str(tmp_path / "store"), cascade))
    assert "a run this export reads" in line, line
    assert _listing(cascade) == before


def test_an_arms_folder_is_refused_but_a_folder_beside_the_arms_is_written(
    cascade: Path,
) -> None:
    """``--out CASCADE`` with an arm given names the arm's own folder; ``--out CASCADE/tb``
    is a new folder in the cascade, as a comparison page there is."""
    pytest.importorskip("tensorboardX")
    one_line_error("export", "--tensorboard", str(cascade / "global"), "--out", str(cascade))
    code, out = cli("export", "--tensorboard", str(cascade / "none"), "--out",
                    str(cascade / "tb"))  # fmt: skip
    assert code == 0, out
    assert list((cascade / "tb" / "none").glob("events.out.tfevents.*"))
    assert not list((cascade / "none").glob("**/events.out.tfevents.*"))


@pytest.mark.parametrize("store", ["ml\x1bruns", "file:{tmp}/ml\nruns"], ids=["esc", "newline"])
def test_an_mlflow_store_with_a_control_character_is_one_line_and_nothing_is_made(
    cascade: Path, tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    line = one_line_error("export", "--mlflow", store.format(tmp=tmp_path), str(cascade))
    assert "--mlflow" in line and "control characters" in line, line
    assert sorted(os.listdir(tmp_path)) == before


def test_a_project_that_is_not_utf8_is_one_line_and_no_store_is_made(
    cascade: Path, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    line = one_line_error("export", "--mlflow", str(store), "--project", "runs\udcff",
                          str(cascade))  # fmt: skip
    assert "--project" in line and "UTF-8" in line and "unexpected shape" not in line, line
    assert not store.exists()


def _done_sweep(tmp_path: Path, cascade: Path) -> Path:
    sweep = make_sweep(tmp_path, cascade, "c1")
    meta = json.loads((sweep / "sweep.json").read_text())
    meta.update(status="done", plotly="shared")
    (sweep / "sweep.json").write_text(json.dumps(meta))
    return sweep


@pytest.mark.parametrize("name", ["sweep.html", "plotly.min.js"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_where_a_sweep_page_goes_is_one_line_and_left_there(
    tmp_path: Path, cascade: Path, name: str, kind: str
) -> None:
    sweep = _done_sweep(tmp_path, cascade)
    place = sweep / name
    if kind == "fifo":
        os.mkfifo(place)
    else:
        place.mkdir()
    line = one_line_error("report", str(sweep))
    assert str(place) in line and "not a regular file" in line, line
    assert place.is_fifo() if kind == "fifo" else place.is_dir()


def test_a_ladder_page_over_a_fifo_is_one_line_and_left_there(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from andrea_diag.errors import UserError
    from andrea_diag.report.page_file import write_page

    os.mkfifo(tmp_path / "ladder.html")
    with pytest.raises(UserError, match="not a regular file"):
        write_page(tmp_path / "ladder.html", "<!doctype html>")
    assert (tmp_path / "ladder.html").is_fifo()


def test_an_event_cause_with_a_line_break_or_bar_stays_one_row_of_the_events_table(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorboardX")
    import pandas as pd

    from andrea_diag.tensorboard import TensorBoardRun

    tb = TensorBoardRun(tmp_path / "tb")
    said: list[str] = []
    real = tb._text

    def text(tag: str, body: str) -> Any:
        said.append(body)
        return real(tag, body)

    tb._text = text  # type: ignore[method-assign]
    events = pd.DataFrame([{"update": 3, "metric": "loss|x", "z": 9.0,
                            "cause": f"a\n| 99 | forged | 1 | row |\n{XSS}"}])  # fmt: skip
    tb.events(events)
    tb.close()
    rows = said[-1].splitlines()
    assert len(rows) == 3, rows  # the head, its rule, one event
    assert rows[2].count(" | ") == 3 and "<script" not in rows[2], rows[2]
    shutil.rmtree(tmp_path / "tb")
