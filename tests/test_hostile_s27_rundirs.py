"""Hostile run and sweep directories, round 27: a table's order and width, and names that
reorder a page (``runread.clean_table``, ``table_width.py``, ``report/safe.py``).

- A metrics table out of update order (hand-merged, two tables concatenated, rows reversed) gave
  an unfinished run's "final loss" from its last *row*: update 1's loss, on the page. Rows are
  now placed by update when the table is read, for every reader.
- A metrics table whose rows have no ``update`` column at all said "it holds data of an
  unexpected shape (KeyError)"; it now says which column is missing.
- A table's width was bounded by nothing but its bytes, and pandas' cost is per column: one
  metrics row of 200,000 keys (3 MB) took minutes to read and clean, a ``sweep.csv`` header of
  200,000 names more than 10 minutes (a column set at a time: quadratic). A table past
  ``table_width.MAX_TABLE_COLUMNS`` (a sweep.csv past ``MAX_SWEEP_COLUMNS``) is one line, unread.
- An arm named with a bidi override in its ``config.json`` (``"\\u202elabolg"``) was drawn on
  the page as "global", the rest of its sentence backwards; such characters are now shown as
  their escapes, on the page and in its figures.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def _write_rows(run: Path, rows: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# ---- a table out of update order ----


def test_rows_out_of_update_order_are_read_in_update_order(run: Path) -> None:
    _write_rows(run, jsonl_metrics(run)[::-1])  # the last update first
    assert load_run(run)["metrics"]["update"].tolist() == list(range(1, N + 1))


def test_an_unfinished_run_out_of_order_reports_its_last_updates_loss_as_final(run: Path) -> None:
    from andrea_diag.report.arms import Arm, final_loss

    rows = jsonl_metrics(run)
    last = next(r["loss"] for r in rows if r["update"] == N)
    _write_rows(run, rows[::-1])
    (run / "summary.json").unlink()  # unfinished: the page's final loss is the last row's
    assert final_loss(Arm.from_run(load_run(run))) == pytest.approx(last)  # was update 1's


def test_a_metrics_table_without_an_update_column_is_one_line_naming_it(run: Path) -> None:
    _write_rows(run, [{k: v for k, v in r.items() if k != "update"} for r in jsonl_metrics(run)])
    line = one_line_error("report", str(run))
    assert "its rows have no update column" in line, line  # was: unexpected shape (KeyError)


# ---- a table of too many columns ----


def test_a_metrics_row_of_more_columns_than_any_run_writes_is_refused_before_its_frame(
    run: Path,
) -> None:
    from andrea_diag.table_width import MAX_TABLE_COLUMNS

    rows = jsonl_metrics(run)
    rows[0].update({f"x{i}": 1.0 for i in range(MAX_TABLE_COLUMNS)})  # 0.3 MB: under every cap
    _write_rows(run, rows)
    line = one_line_error("report", str(run))
    assert f"has more than {MAX_TABLE_COLUMNS:,} columns" in line, line


def test_a_parquet_table_of_more_columns_than_the_cap_is_refused_from_its_footer(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap lowered to a tenth of the run's own columns: a real one is not worth writing."""
    from andrea_diag import table_width
    from andrea_diag.parquet_read import read_parquet

    monkeypatch.setattr(table_width, "MAX_TABLE_COLUMNS", 3)
    with pytest.raises(UserError, match="has more than 3 columns"):
        read_parquet(run / "metrics.parquet")


def test_a_sweep_csv_of_more_columns_than_any_sweep_writes_is_one_line(
    tmp_path: Path, cascade: Path
) -> None:
    from andrea_diag.table_width import MAX_SWEEP_COLUMNS

    sweep = make_sweep(tmp_path, cascade, "c1")
    table = pd.read_csv(sweep / "sweep.csv")
    wide = pd.concat([table, pd.DataFrame({f"x{i}": [1] * len(table)
                                           for i in range(MAX_SWEEP_COLUMNS)})], axis=1)  # fmt: skip
    wide.to_csv(sweep / "sweep.csv", index=False)
    line = one_line_error("report", str(sweep))
    assert f"has more than {MAX_SWEEP_COLUMNS:,} columns" in line, line
    assert not (sweep / "sweep.html").exists()


@pytest.mark.parametrize(
    ("header", "said"),
    [("\n\n", "has more than 1,000 columns"), ('"x\n",', "quotes a column name")],
    ids=["blank-lines-first", "quoted-line-break"],
)
def test_a_wide_sweep_csv_header_cannot_slip_past_the_count_of_its_first_line(
    tmp_path: Path, cascade: Path, monkeypatch: pytest.MonkeyPatch, header: str, said: str
) -> None:
    """Found by review: the count read the first physical line only, and pandas skips blank
    lines before the header, and a quoted name may hold a line break: 5,000 columns were read
    as 1. The table is never parsed now."""
    from andrea_diag import runread, sweep_table

    sweep = make_sweep(tmp_path, cascade, "c1")
    names = ",".join(f"x{i}" for i in range(5000))
    (sweep / "sweep.csv").write_text(f"{header}{names}\n" + ",".join(["1"] * 5000) + "\n")
    monkeypatch.setattr(runread.pd, "read_csv", _never_parsed)
    with pytest.raises(UserError, match=said):
        sweep_table.read_sweep_csv(sweep)


def _never_parsed(*args: object, **kwargs: object) -> None:
    raise AssertionError("a sweep.csv past the column cap was parsed")


# ---- names that reorder or hide text on a page ----

RLO = "\u202e"


def test_an_arm_named_with_a_bidi_override_is_shown_as_its_escape_on_the_page(
    cascade: Path,
) -> None:
    edit(cascade / "none" / "config.json", arm=f"{RLO}labolg")  # drawn as "global"
    code, said = cli("report", str(cascade))
    assert code == 0, said
    page = (cascade / "report.html").read_text()
    assert RLO not in page
    assert ">\\u202elabolg</td>" in page  # the summary table
    assert '"name": "\\\\u202elabolg"' in page  # a figure's trace (JSON: the \ escaped)


@pytest.mark.parametrize(
    ("text", "shown"),
    [("a\u2066b", "a\\u2066b"), ("a\u200bb", "a\\u200bb"), ("a\x1bb", "a\\x1bb"),
     ("a\u2028b", "a\\u2028b")],
    ids=["isolate", "zero-width-space", "esc", "line-separator"],
)  # fmt: skip
def test_a_page_value_shows_what_would_reorder_or_hide_it_and_keeps_plain_text(
    text: str, shown: str
) -> None:
    from andrea_diag.report.safe import esc, plotly_text

    assert esc(text) == shown
    assert plotly_text(text) == shown
    for plain in ("a\nb\tc", "گزارش\u200cها"):  # HTML's white space; a Persian word's ZWNJ
        assert esc(plain) == plain == plotly_text(plain)


@pytest.mark.parametrize("mark", ["\u200e", "\u200f", "\u061c"], ids=["lrm", "rlm", "alm"])
def test_a_direction_mark_is_escaped_on_a_page_and_refused_in_a_name(mark: str) -> None:
    """Found by review: the pages' set and the names' set were two hand copies, both without
    the invisible direction marks, which move the neutral characters around them."""
    from andrea_diag.errors import unsafe
    from andrea_diag.report.safe import esc

    assert str(esc(f"none{mark} (1)")) == f"none\\u{ord(mark):04x} (1)"
    assert unsafe(f"run{mark}") and not unsafe("\u06af\u200c\u0647")  # a ZWNJ stays text
