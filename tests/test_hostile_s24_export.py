"""``export`` of a damaged run directory (round 24): what the run recorded reaches each tool,
or one ``error:`` line says why not, never half an export.

- W&B keeps one row per step, in step order: a metrics table out of update order lost every row
  after the first it saw (19 of 20, exit 0); an update given twice or below 0 is refused first.
- MLflow refuses a metric name with a character or a path it does not take (``a/``, ``../x``,
  an ESC): such a column refused the whole export in its middle; it is now renamed, as a
  param's key already was (``sinks.mlflow_params``).
- A row time past year 9999 overflowed MLflow's epoch milliseconds ("unexpected shape").
- A ``partial_summary.json`` or an arm's ``config.json`` that is a loop or a dangling link was
  left out without a word; an arm listed twice in ``cascade.json`` was "given twice".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    N,
    cascade_fixture,
    cli,
    jsonl_metrics,
    one_line_error,
    run_fixture,
)
from test_hostile_s21_links import loop

from andrea_diag import sinks


def _write_rows(run: Path, rows: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _mlflow_runs(store: Path) -> dict[str, Path]:
    """run name -> its folder in an MLflow file store."""
    runs = {}
    for meta in store.glob("*/*/meta.yaml"):
        name = [ln for ln in meta.read_text().splitlines() if ln.startswith("run_name:")]
        if name:
            runs[name[0].split(":", 1)[1].strip()] = meta.parent
    return runs


def _metric_names(run_folder: Path) -> set[str]:
    metrics = run_folder / "metrics"
    return {str(p.relative_to(metrics)) for p in metrics.rglob("*") if p.is_file()}


# ---- W&B: rows in update order, one per step ----


@pytest.mark.slow  # wandb starts its core process once per run
def test_wandb_keeps_every_row_of_a_table_out_of_update_order(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from wandb_records import wandb_history

    _write_rows(run, jsonl_metrics(run)[::-1])  # last update first
    out = tmp_path / "wb"
    code, said = cli("export", "--wandb", str(run), "--out", str(out))
    assert code == 0, said
    (file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    assert sorted(wandb_history(file)) == list(range(1, N + 1))  # was [30]: 29 rows dropped


@pytest.mark.parametrize(
    ("change", "said"),
    [(lambda rows: [*rows, dict(rows[5], loss=99.0)], "update 6 twice"),
     (lambda rows: [dict(rows[0], update=-3), *rows[1:]], "update -3, below 0")],
    ids=["repeated", "negative"],
)  # fmt: skip
def test_an_update_wandb_cannot_keep_is_one_line_before_any_wandb_run(
    run: Path, tmp_path: Path, change, said: str
) -> None:
    pytest.importorskip("wandb")
    _write_rows(run, change(jsonl_metrics(run)))
    out = tmp_path / "wb"
    line = one_line_error("export", "--wandb", str(run), "--out", str(out))
    assert said in line and "W&B" in line
    assert not list(out.glob("wandb/*run-*"))  # before any run: no W&B run holds a row less
    code, _ = cli("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))
    assert code == 0  # the tools that keep both rows still take the run


# ---- MLflow: names and times it refuses ----

COLUMNS = ["a/", "a//b", "../../x", "/abs", "..x", "a\x1bb", "x" * 300]


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: repr(c[:12]))
def test_a_column_mlflow_would_refuse_is_exported_under_a_name_it_takes(
    cascade: Path, tmp_path: Path, column: str
) -> None:
    pytest.importorskip("mlflow")
    arm = cascade / "none"
    _write_rows(arm, [dict(r, **{column: float(r["update"])}) for r in jsonl_metrics(arm)])
    store = tmp_path / "mlruns"
    code, said = cli("export", "--mlflow", str(store), str(cascade))
    assert code == 0, said  # was: MLflow refused the export ... Invalid value "a/"
    runs = _mlflow_runs(store)
    assert sorted(runs) == ["cascade/global", "cascade/none"], runs
    none = runs["cascade/none"]
    assert "loss/train" in _metric_names(none)
    tag = column if "/" in column else f"misc/{column}"  # tensorboard_tag's rule
    column_file = none / "metrics" / sinks.mlflow_metric_key(tag)
    assert len(column_file.read_text().splitlines()) == N  # every row of the column
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cascade", "mlruns"]  # nothing beside


def test_names_that_meet_once_cleaned_or_nest_stay_apart() -> None:
    assert sinks.mlflow_metric_key("misc/é:ü") == "misc/é:ü"  # a name MLflow takes is kept
    used: set[str] = set()
    for tag in ["misc/a", "misc/a/b", "misc/a?b", "misc/a_b", "x" * 300, "x" * 301]:
        key = sinks.free_key(tag, used)
        assert key not in used and len(key) <= 250
        assert not any(u.startswith(key + "/") or key.startswith(u + "/") for u in used)
        used.add(key)


def test_a_row_time_past_year_9999_goes_to_mlflow_at_the_time_of_the_export(
    run: Path, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    _write_rows(run, [dict(r, unix_time_s=1e308) for r in jsonl_metrics(run)])
    store = tmp_path / "mlruns"
    code, said = cli("export", "--mlflow", str(store), str(run))
    assert code == 0, said  # was: unexpected shape (OverflowError)
    (folder,) = _mlflow_runs(store).values()
    stamps = {int(ln.split()[0]) for ln in (folder / "metrics/loss/train").read_text().splitlines()}
    assert all(1e12 < s < 1e14 for s in stamps)  # milliseconds of now, not of 1e308 s


# ---- links and names in the run dir ----


def test_a_partial_summary_linked_to_itself_is_one_line_not_left_out(
    run: Path, tmp_path: Path
) -> None:
    (run / "summary.json").unlink()
    loop(run / "partial_summary.json")
    line = one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))
    assert "partial_summary.json" in line and "loop" in line


def test_an_arm_whose_config_is_a_dangling_link_is_one_line_not_left_out(
    cascade: Path, tmp_path: Path
) -> None:
    (cascade / "none" / "config.json").unlink()
    (cascade / "none" / "config.json").symlink_to("gone.json")
    line = one_line_error("export", "--tensorboard", str(cascade), "--out", str(tmp_path / "tb"))
    assert str(cascade / "none") in line
    assert not (tmp_path / "tb").exists()  # not the other arm alone


def test_an_arm_listed_twice_in_cascade_json_is_exported_once(
    cascade: Path, tmp_path: Path
) -> None:
    (cascade / "cascade.json").write_text(json.dumps({"arms": ["none", "global", "none"]}))
    code, said = cli("export", "--tensorboard", str(cascade), "--out", str(tmp_path / "tb"))
    assert code == 0, said  # was: the same run directory was given twice
    assert sorted(p.name for p in (tmp_path / "tb" / cascade.name).iterdir()) == ["global", "none"]


def test_an_arm_linked_to_its_sibling_is_one_line_naming_both(
    cascade: Path, tmp_path: Path
) -> None:
    (cascade / "global").rename(tmp_path / "moved")
    (cascade / "global").symlink_to("none")
    line = one_line_error("export", "--tensorboard", str(cascade), "--out", str(tmp_path / "tb"))
    assert str(cascade / "none") in line and str(cascade / "global") in line
