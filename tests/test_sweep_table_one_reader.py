"""The sweep page and the ladder read ``sweep.csv`` through one reader (``sweep_table.py``):
before, each typed the columns by its own rules, so a damaged file could give the ladder's
statements and the sweep page two different tables of the same sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from andrea_diag.errors import UserError
from andrea_diag.experiments.ladder import read_sweep_outputs
from andrea_diag.report.sweep_dir import read_sweep_table

HEADER = (
    "cell,size,lr,max_norm,seed,precision,clip,final_loss,final_eval_loss,collapse,status,error"
)


def _sweep(tmp_path: Path, rows: list[str]) -> Path:
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"sizes": ["12m", "120m"], "steps": 100}))
    (out / "sweep.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return out


DAMAGED = [
    "12m-s0,12m,0.0003,1,0,fp32,none,3.5,3.9,False,done,",
    "12m-s0,12m,0.0003,1,0,fp32,global,three,3.8,false,done,",  # text in a number column
    "12m-s1,12m,0.0003,1,1,,none,3.4,nan,True,done,",  # a precision gap: the default
    "12m-s1,12m,0.0003,1,1,,global,3.3,3.7,,failed,boom",
    "12m-s2,12m,0.0003,1,x,fp32,none,3.4,3.8,False,done,",  # no seed: no place in the grid
]


def test_the_ladder_and_the_sweep_page_read_a_damaged_sweep_csv_alike(tmp_path: Path) -> None:
    out = _sweep(tmp_path, DAMAGED)
    page = read_sweep_table(out)
    _, ladder = read_sweep_outputs(out)
    pd.testing.assert_frame_equal(page, ladder)
    assert len(page) == 4 and page["seed"].tolist() == [0, 0, 1, 1]
    assert page["final_loss"].isna().tolist() == [False, True, False, False]
    assert page["precision"].tolist() == ["fp32"] * 4
    assert page["collapse"].tolist() == [False, False, True, None]


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ([], r"has no rows"),
        (["../victim,12m,0.0003,1,0,fp32,none,3.5,3.9,False,done,"], r"victim"),
        (DAMAGED[:1] * 2, r"lists the same arm twice"),
        ([",12m,0.0003,1,0,fp32,none,3.5,3.9,False,done,"], r"has a row without a cell"),
    ],
    ids=["empty", "cell-outside", "arm-twice", "no-cell"],
)
def test_the_ladder_refuses_what_the_sweep_page_refuses_in_one_line(
    tmp_path: Path, rows: list[str], said: str
) -> None:
    out = _sweep(tmp_path, rows)
    for read in (read_sweep_table, read_sweep_outputs):
        with pytest.raises(UserError, match=said):
            read(out)


def test_the_ladder_alone_wants_a_status_column_and_its_own_sizes(tmp_path: Path) -> None:
    """The ladder counts finished arms by ``status`` and states rates per rung of its sizes."""
    out = _sweep(tmp_path, ["30m-s0,30m,0.0003,1,0,fp32,none,3.5,3.9,False,done,"])
    assert len(read_sweep_table(out)) == 1
    with pytest.raises(UserError, match=r"size '30m', not one of the ladder's sizes"):
        read_sweep_outputs(out)
    text = (out / "sweep.csv").read_text().replace(",status,error", ",state,error")
    (out / "sweep.csv").write_text(text)
    assert len(read_sweep_table(out)) == 1
    with pytest.raises(UserError, match=r"has no status column"):
        read_sweep_outputs(out)


def test_an_empty_collapse_cell_is_a_gap_filled_from_the_verdict_not_a_no(tmp_path: Path) -> None:
    """Before: the page's reader turned an empty ``collapse`` cell into False, so a diverged
    arm whose flag was lost showed as not collapsed; the rates' own reader made it a gap."""
    from andrea_diag.report.sweep_page import collapsed

    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"sizes": ["12m", "120m"]}))
    (out / "sweep.csv").write_text(
        "cell,size,lr,max_norm,seed,clip,lockin,collapse,status\n"
        "a,12m,0.0003,1,0,none,diverged,,done\n"
        "a,12m,0.0003,1,0,global,healthy,maybe,done\n"
    )
    table = read_sweep_table(out)
    assert table["collapse"].tolist() == [None, None]
    assert collapsed(table).tolist() == [True, False]
