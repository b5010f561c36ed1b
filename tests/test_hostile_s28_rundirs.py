"""Hostile run and sweep directories, round 28: a summary that is not the run's, text no UTF-8
encoder takes, the parquet reader's own open, a window of no updates, and counts past any run.

- A ``summary.json`` copied from a sibling arm (or edited) was shown as the arm's own: its final
  loss, held-out loss and % clipped on the page and in the export. The trainer's figures are now
  checked against the arm's own metrics table (``summary_check.py``): the table's win, and the
  mismatch is one warning line and a note on the page.
- A lone surrogate (``"\\ud800"``) in any JSON string refused the whole page ("unexpected shape
  (UnicodeEncodeError)"): pandas stores text with pyarrow, which cannot encode it, and neither
  can a page. A resumed monitor with one in a kept row ended in a traceback. It is now U+FFFD.
- A run folder named in another encoding (``run\\xff``) was "not a readable parquet file ... delete
  it": pyarrow opened the path itself, and cannot encode it. It also opened it after the check
  (a FIFO swapped in between hung the report). It now reads the descriptor the check opened.
- ``boundary_k 0`` (a run may take it) ended ``report`` in a ZeroDivisionError traceback; a
  negative one read "-5 updates after a boundary".
- A samples or metrics column the readers average (``max_logit``, ``lockin/mean_entropy``) held
  as text refused the page ("unexpected shape (TypeError)"): it is now a gap.
- A ``cascade.json`` of 100,000 arms took 15 s (a gigabyte of them, hours); a ``sweep.csv`` of
  300,000 rows a minute (5 at its byte cap). Both are one line past what any run writes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    N,
    cascade_fixture,
    cli,
    edit,
    jsonl_metrics,
    make_sweep,
    one_line_error,
    run_fixture,
)

from andrea_diag.errors import UserError
from andrea_diag.record import load_run

RECORD_LOG = "andrea_diag.record"


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # "\ud800" as its escape


# ---- a summary that is not the run's ----


def _trainer_summary(arm_dir: Path, clip: str, seed: int) -> dict[str, Any]:
    """The summary the trainer writes at close (train/summary.py), from the arm's own table."""
    from andrea_diag.config import RunConfig
    from andrea_diag.train.summary import summarize

    cfg = RunConfig(size="tiny", clip=clip, steps=N, seed=seed).resolve()
    summary = summarize(SimpleNamespace(run_dir=arm_dir), cfg, wall_s=1.0)  # type: ignore[arg-type]
    (arm_dir / "summary.json").write_text(json.dumps(summary))
    return summary


@pytest.fixture(name="trained")
def trained_fixture(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    """A two-arm cascade whose arms differ (seeds 0 and 1), each with the trainer's summary."""
    c = tmp_path / "trained"
    for seed, arm in enumerate(("none", "global")):
        make_run(c / arm, clip=arm, n_updates=N, seed=seed)
        _trainer_summary(c / arm, arm, seed)
    (c / "cascade.json").write_text(json.dumps({"arms": ["none", "global"], "status": "done",
                                                "size": "tiny", "seed": 0}))  # fmt: skip
    return c


def _mismatch_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "summary.json is" in r.getMessage()]


def test_a_summary_copied_from_a_sibling_arm_shows_the_arms_own_figures_and_says_so(
    trained: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from andrea_diag.report.arms import Arm, summary_row

    own = json.loads((trained / "none" / "summary.json").read_text())
    sibling = json.loads((trained / "global" / "summary.json").read_text())
    assert own["final_loss"] != sibling["final_loss"]
    shutil.copy(trained / "global" / "summary.json", trained / "none" / "summary.json")
    with caplog.at_level(logging.WARNING, RECORD_LOG):
        run = load_run(trained / "none")
    for key in ("final_loss", "min_loss", "max_grad_norm", "pct_clipped", "n_updates"):
        assert run["summary"][key] == pytest.approx(own[key]), key  # was the sibling's
    assert summary_row(Arm.from_run(run))["final loss"] == pytest.approx(own["final_loss"])
    (line,) = _mismatch_lines(caplog)  # one line
    assert "is another run's: clip global (config.json: none)" in line, line
    code, said = cli("report", str(trained))
    assert code == 0, said
    page = (trained / "report.html").read_text()
    assert "none: " in page and "summary.json is another run&#x27;s: clip global" in page


def test_a_summary_edited_by_hand_loses_to_the_table_and_is_named(
    trained: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own = json.loads((trained / "none" / "summary.json").read_text())
    edit(trained / "none" / "summary.json", final_loss=1.0, final_eval_loss=0.5)
    with caplog.at_level(logging.WARNING, RECORD_LOG):
        summary = load_run(trained / "none")["summary"]
    assert summary["final_loss"] == pytest.approx(own["final_loss"])
    assert summary.get("final_eval_loss") is None  # the table has no eval rows: not 0.5
    (line,) = _mismatch_lines(caplog)
    assert "summary.json is not what its own metrics table says: final_loss 1 (table: " in line


def test_the_trainers_own_summary_agrees_with_its_table_and_is_left_as_written(
    trained: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No false alarm: the check's rule is the trainer's, to the last bit."""
    written = json.loads((trained / "global" / "summary.json").read_text())
    with caplog.at_level(logging.WARNING, RECORD_LOG):
        run = load_run(trained / "global")
    assert run["summary_mismatch"] is None and not _mismatch_lines(caplog)
    assert {k: run["summary"][k] for k in written} == written


def test_the_tables_figures_are_the_trainers_on_eval_rows_and_non_finite_values(
    tmp_path: Path,
) -> None:
    """The rule is written twice (the reader may not import the trainer): pinned equal."""
    from andrea_diag.config import RunConfig
    from andrea_diag.runread import clean_table, read_jsonl
    from andrea_diag.summary_check import FIGURES, table_figures
    from andrea_diag.train.summary import summarize

    rows = [{"update": u, "loss": 5.0 - u / 40 if u != 7 else "nan", "grad_norm":
             "inf" if u == 9 else 1.0 + (u % 7) / 3, "clip_coef": min(1.0, 1.5 / (1 + u % 5)),
             "boundary": u % 20 == 1, "nonfinite": u == 7, "applied": u != 7,
             **({"eval_loss": 6.0 - u / 50} if u % 25 == 0 else {})}
            for u in range(1, 101)]  # fmt: skip
    path = tmp_path / "metrics.jsonl"
    _write_rows(path, rows)
    cfg = RunConfig(size="tiny", steps=100).resolve()
    trainer = summarize(SimpleNamespace(run_dir=tmp_path), cfg, wall_s=1.0)  # type: ignore[arg-type]
    ours = table_figures(clean_table(read_jsonl(path), "metrics", path))
    assert set(FIGURES) <= set(ours)
    assert {k: ours[k] for k in FIGURES} == {k: trainer[k] for k in FIGURES}


def test_a_summary_the_trainer_did_not_write_is_not_held_to_its_rule(
    run: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SpikeMonitor's summary names no arm and records no loss figures; an old or hand-made
    one may compute them otherwise (the synthetic runs' fixed 2.6): left as written."""
    with caplog.at_level(logging.WARNING, RECORD_LOG):
        loaded = load_run(run)
    assert loaded["summary"]["final_loss"] == 2.6 and loaded["summary_mismatch"] is None
    assert not _mismatch_lines(caplog)


# ---- text no UTF-8 encoder takes ----

LONE = "\ud800"


def test_a_lone_surrogate_in_a_table_row_is_read_as_a_replacement_character(run: Path) -> None:
    rows = jsonl_metrics(run)
    rows[3]["injected"] = f"x{LONE}"
    rows[4][f"loss_{LONE}"] = 1.0  # in a column's name too
    _write_rows(run / "metrics.jsonl", rows)
    metrics = load_run(run)["metrics"]  # was: UnicodeEncodeError, from pandas
    # a value's surrogate is U+FFFD; a column name's is its escape (two names stay two)
    assert metrics["injected"][3] == "x\ufffd" and "loss_\\ud800" in metrics


def test_a_lone_surrogate_in_a_side_file_or_sample_still_renders_the_page(cascade: Path) -> None:
    edit(cascade / "none" / "config.json", recipe=f"r{LONE}")
    edit(cascade / "none" / "env.json", torch=LONE)
    samples = cascade / "global" / "samples.jsonl"
    rows = [json.loads(x) for x in samples.read_text().splitlines()]
    _write_rows(samples, [{**r, "text": f"{LONE} {r['text']}"} for r in rows])
    code, said = cli("report", str(cascade))
    assert code == 0, said  # was: "unexpected shape (UnicodeEncodeError)", no page
    assert "r\ufffd" in (cascade / "report.html").read_text()


def test_a_kept_row_holding_a_lone_surrogate_is_read_and_the_resumed_monitor_closes(
    tmp_path: Path,
) -> None:
    from test_hostile_s22_monitor import _run

    run = _run(tmp_path / "run").run_dir
    path = run / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["injected"] = LONE
    _write_rows(path, rows)
    resumed = _run(run, updates=1, resume=True)  # was: UnicodeEncodeError at its start
    assert resumed.summary is not None and (run / "metrics.parquet").exists()
    assert load_run(run)["metrics"]["update"].tolist() == [1, 2, 3]


def test_a_page_shows_a_lone_surrogate_as_its_escape() -> None:
    from andrea_diag.report.safe import esc, plotly_text

    assert esc("run\udcff") == "run\\udcff" == plotly_text("run\udcff")


def test_a_run_folder_named_in_another_encoding_gets_its_page(cascade: Path) -> None:
    """A folder named in Latin-1 (``run\\xff``) is ``run\\udcff`` to Python: pyarrow could
    not open it, and said the good metrics.parquet was damaged, to be deleted."""
    odd = Path(os.fsdecode(os.fsencode(cascade.parent) + b"/run\xff"))
    cascade.rename(odd)
    code, said = cli("report", str(odd))
    assert code == 0, said
    page = (odd / "report.html").read_text()
    assert "run\\udcff" in page  # "rendered from": the folder, shown as its escape


# ---- the parquet table read through the descriptor its check opened ----


@pytest.fixture
def fifo_writer() -> Iterator[Callable[[Path], None]]:
    """Opens a FIFO at the path for writing once a reader blocks on it, so a reader that
    waits for one (the old code) fails the test instead of hanging the suite."""
    done = threading.Event()

    def start(path: Path) -> None:
        def release() -> None:
            while not done.wait(0.2):
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    continue  # no reader waiting (ENXIO), or not a FIFO yet
                return

        threading.Thread(target=release, daemon=True).start()

    yield start
    done.set()


def test_a_parquet_table_swapped_for_a_fifo_after_its_check_is_refused_not_waited_on(
    run: Path, monkeypatch: pytest.MonkeyPatch, fifo_writer: Callable[[Path], None]
) -> None:
    from andrea_diag import parquet_read, rundir

    table = run / "metrics.parquet"
    real = rundir.regular_file

    def checked_then_swapped(path: Path, what: str) -> Path:
        out = real(path, what)
        if Path(path) == table:
            os.mkfifo(run / "fifo")
            os.replace(run / "fifo", table)
            fifo_writer(table)
        return out

    monkeypatch.setattr(rundir, "regular_file", checked_then_swapped)
    monkeypatch.setattr(parquet_read, "regular_file", checked_then_swapped, raising=False)
    started = time.monotonic()
    with pytest.raises(UserError, match="is not a regular file"):
        parquet_read.read_parquet(table)
    assert time.monotonic() - started < 5


# ---- a window of no updates ----


def test_a_run_of_boundary_k_0_gets_its_report_without_a_loss_change(cascade: Path) -> None:
    """``--boundary-k 0`` is a setting the trainer takes (a spike at the boundary itself)."""
    edit(cascade / "none" / "config.json", probes__boundary_k=0)
    edit(cascade / "none" / "summary.json", spikes__thresholds__boundary_k=0)
    code, said = cli("report", str(cascade))
    assert code == 0, said  # was: a ZeroDivisionError traceback
    page = (cascade / "report.html").read_text()
    assert "none: boundary_k 0 leaves no update to compare; loss change not measured." in page


def test_a_negative_boundary_k_is_not_the_runs_window(cascade: Path) -> None:
    edit(cascade / "none" / "config.json", probes__boundary_k=-5)
    code, said = cli("report", str(cascade))
    assert code == 0, said
    page = (cascade / "report.html").read_text()
    assert "-5 updates" not in page  # the default window instead
    assert "none: mean loss change over the 3 updates after a boundary" in page


# ---- columns the readers average, held as text ----


def test_a_lockin_column_of_text_is_a_gap_not_a_refused_page(cascade: Path) -> None:
    samples = cascade / "none" / "samples.jsonl"
    rows = [json.loads(x) for x in samples.read_text().splitlines()]
    _write_rows(samples, [{**r, "max_logit": "", "mean_entropy": "high"} for r in rows])
    code, said = cli("report", str(cascade))
    assert code == 0, said  # was: "unexpected shape (TypeError)"


def test_a_metrics_column_the_schema_declares_a_number_is_read_as_one() -> None:
    from andrea_diag.runread import clean_table

    df = pd.DataFrame({"update": [1, 2], "lockin/mean_entropy": ["x", "2.5"],
                       "microbatches": ["a", "b"], "phase_name": ["warm", "hot"]})  # fmt: skip
    out = clean_table(df, "metrics", Path("metrics.jsonl"))
    assert out["lockin/mean_entropy"].dtype == "float64" and out["microbatches"].isna().all()
    assert out["phase_name"].tolist() == ["warm", "hot"]  # text stays text


# ---- counts past any run ----


def test_a_cascade_json_of_more_arms_than_any_cascade_runs_is_one_line(cascade: Path) -> None:
    from andrea_diag.runread import MAX_ARMS, read_cascade_meta

    edit(cascade / "cascade.json", arms=["none", "global", *[f"a{i}" for i in range(MAX_ARMS)]])
    with pytest.raises(UserError, match=f"lists {MAX_ARMS + 2:,} arms, more than a cascade runs"):
        read_cascade_meta(cascade)
    line = one_line_error("report", str(cascade))
    assert "more than a cascade runs" in line
    assert not (cascade / "report.html").exists()


def test_a_sweep_csv_of_more_rows_than_any_sweep_runs_is_one_line(
    tmp_path: Path, cascade: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap lowered below the sweep's 4 rows: 200,000 are not worth writing."""
    from andrea_diag import sweep_table

    monkeypatch.setattr(sweep_table, "MAX_SWEEP_ROWS", 3)
    sweep = make_sweep(tmp_path, cascade, "c1")
    line = one_line_error("report", str(sweep))
    assert "has 4 rows, more arms than a sweep runs (3)" in line, line
    assert not (sweep / "sweep.html").exists()


def test_load_runs_reads_each_run_once(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    """It read a run whole to learn its arm's name, then again for its rows: every warning
    about the run (a torn line, a summary not its own) was said twice."""
    from andrea_diag.runs import load_runs

    rows = jsonl_metrics(run)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"upd\n')
    with caplog.at_level(logging.WARNING, RECORD_LOG):
        df = load_runs(run)
    assert len(df) == N
    torn = [r for r in caplog.records if "unreadable line" in r.getMessage()]
    assert len(torn) == 1, [r.getMessage() for r in torn]


def test_two_keys_differing_only_in_a_lone_surrogate_stay_two_columns() -> None:
    # review finding: both became "a\ufffd", and one column's values were lost without a word
    import json

    from andrea_diag.surrogates import mended

    text = '{"a\\ud800": 1, "a\\ud801": 2, "v": "x\\ud800"}'
    got = mended(json.loads(text), text)
    assert got == {"a\\ud800": 1, "a\\ud801": 2, "v": "x\ufffd"}
    json.dumps(got, ensure_ascii=False).encode("utf-8")  # nothing left no encoder takes
