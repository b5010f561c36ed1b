"""A sweep folder someone else made, its page rendered again by ``report`` (round 25): what
``sweep.csv`` lacks or holds as text is a gap on the page, or one line, never a KeyError nor a
claim made of a gap (``report/sweep_dir.py`` ``read_sweep_table``, ``report/sweep_page.py``).

- A loss, spike or verdict column the page computes on was a KeyError ("cannot render ...:
  unexpected shape"); it is now a gap in every row, with a warning.
- A table without an arm's place (lr, max_norm, seed, size) said "unexpected shape", or "lists
  the same arm twice" for lr; it now names the column. A row whose place is text is left out
  with a warning, as the ladder's reader leaves it out.
- A gap in a done arm's loss read "clipping cost nan nats"; spikes read "nan".
- A sweep of two precisions labelled its cells "tiny bf16 bf16" and paired no seed; its chart
  drew nothing.
- A sweep folder named with a Unicode line separator broke the "sweep:" line in two.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hostile_dirs import cli, one_line_error

from andrea_diag.errors import UserError
from andrea_diag.report.sweep_dir import read_sweep_table, render_sweep_dir
from andrea_diag.report.sweep_page import findings, intervals_section, regime_figure


def _rows(precisions: tuple[str, ...] = ("fp32",), seeds: tuple[int, ...] = (0,)) -> list[dict]:
    """sweep.csv rows: two lrs x the precisions x the seeds, arms none and global."""
    return [{"cell": f"tiny-lr{lr:g}-{p}-s{seed}", "size": "tiny", "lr": lr, "max_norm": 1.0,
             "seed": seed, "precision": p, "clip": clip,
             "final_loss": 3.0 + (clip == "none") + seed / 100, "min_loss": 2.5,
             "final_eval_loss": 3.1 + (clip == "none") + seed / 100, "n_spikes": 1,
             "max_grad_norm": 2.0, "final_v_share": 0.1, "lockin": "healthy",
             "collapse": False, "status": "done"}
            for lr in (1e-3, 1e-2) for p in precisions for seed in seeds
            for clip in ("none", "global")]  # fmt: skip


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A finished sweep's own files; no cell folder (none is read to render the page)."""
    out = tmp_path / "sweep"
    out.mkdir()
    pd.DataFrame(_rows()).to_csv(out / "sweep.csv", index=False)
    meta = {
        "sizes": ["tiny"],
        "lrs": [1e-3, 1e-2],
        "max_norms": [1.0],
        "seeds": [0],
        "clips": ["none", "global"],
        "steps": 3,
        "recipe": "v1",
        "command": "sweep",
    }
    (out / "sweep.json").write_text(json.dumps(meta))
    return out


def _rewrite(sweep: Path, change) -> None:
    table = pd.read_csv(sweep / "sweep.csv", dtype=str, keep_default_na=False)
    change(table).to_csv(sweep / "sweep.csv", index=False)


def _findings(page: str) -> str:
    return page.split("<h2>Findings</h2>", 1)[1].split("</ul>", 1)[0]


@pytest.mark.parametrize("column", ["final_loss", "min_loss", "n_spikes", "max_grad_norm",
                                    "lockin"])  # fmt: skip
def test_a_sweep_csv_without_a_column_the_page_computes_on_shows_it_as_a_gap(
    sweep: Path, column: str, caplog: pytest.LogCaptureFixture
) -> None:
    _rewrite(sweep, lambda t: t.drop(columns=[column]))
    code, said = cli("report", str(sweep))
    assert code == 0, said  # was: cannot render ...: unexpected shape (KeyError)
    assert f"no {column} column; shown as a gap" in caplog.text
    page = render_sweep_dir(sweep).read_text()  # the library too: no KeyError
    assert "nan" not in _findings(page).lower()


@pytest.mark.parametrize("column", ["lr", "max_norm", "seed", "size"])
def test_a_sweep_csv_without_an_arms_place_names_the_missing_column(
    sweep: Path, column: str
) -> None:
    _rewrite(sweep, lambda t: t.drop(columns=[column]))
    line = one_line_error("report", str(sweep))
    assert f"has no {column} column" in line, line  # was: unexpected shape / same arm twice
    assert "unexpected shape" not in line
    with pytest.raises(UserError, match=f"no {column} column"):
        read_sweep_table(sweep)


def test_rows_whose_place_is_text_are_left_out_with_a_warning_and_all_of_them_is_one_line(
    sweep: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def one_bad(t: pd.DataFrame) -> pd.DataFrame:
        t.loc[0, "seed"] = "s0"  # c0's none arm: no seed, no pair
        return t

    _rewrite(sweep, one_bad)
    code, said = cli("report", str(sweep))
    assert code == 0, said
    assert "1 row(s) without a number in lr, max_norm or seed left out" in caplog.text
    assert len(read_sweep_table(sweep)) == 3
    _rewrite(sweep, lambda t: t.assign(lr="fast"))
    line = one_line_error("report", str(sweep))
    assert "no row with a number in lr, max_norm and seed" in line  # was: the same arm twice


@pytest.mark.parametrize("value", ["", "n/a", "inf"])
def test_a_done_arm_without_a_finite_loss_is_no_claim(sweep: Path, value: str) -> None:
    def lost(t: pd.DataFrame) -> pd.DataFrame:
        t.loc[t["clip"] == "none", ["final_loss", "final_eval_loss"]] = value
        t.loc[t["clip"] == "global", ["final_eval_loss"]] = value
        return t

    _rewrite(sweep, lost)
    table = read_sweep_table(sweep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf warned from numpy on the console
        text = " ".join(findings(table)) + intervals_section(table)
    assert re.search(r"no finite (held-out|final training) loss to compare", text), text
    assert "nan nats" not in text and "clipping cost" not in text  # was: clipping cost nan nats


def test_spikes_a_sweep_csv_lacks_read_as_a_gap_not_nan(sweep: Path) -> None:
    _rewrite(sweep, lambda t: t.drop(columns=["n_spikes"]))
    text = " ".join(findings(read_sweep_table(sweep)))
    assert "spikes - unclipped vs - global" in text and "nan" not in text  # was: spikes nan


def test_a_sweep_of_two_precisions_pairs_each_cells_seeds_and_draws_them() -> None:
    table = pd.DataFrame(_rows(precisions=("fp32", "bf16"), seeds=(0, 1)))
    text = " ".join(findings(table))
    assert "bf16 bf16" not in text  # was: the precision appended twice
    assert "2 pairs at tiny bf16 lr 0.001" in text and "0 pairs" not in text, text
    fig = regime_figure(table)
    drawn = [t for t in fig.data if len(t.x) and not all(math.isnan(y) for y in t.y)]
    assert len(drawn) == 2 * 2 * 2  # (loss, spikes) x 2 precisions x 2 arms; was: none


def test_a_sweep_folder_named_with_a_line_separator_is_echoed_on_one_line(
    tmp_path: Path, sweep: Path
) -> None:
    named = sweep.rename(tmp_path / "a\u2028b")
    code, said = cli("report", str(named))
    assert code == 0, said
    line = [ln for ln in said.splitlines() if "sweep.html" in ln]
    assert line == [f"sweep: {tmp_path}/a\\u2028b/sweep.html"], said  # was: two lines
