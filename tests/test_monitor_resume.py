"""``SpikeMonitor(resume=True)`` reads back its folder as untrusted input
(andrea_diag/monitor_resume.py), after review: a negative last update, an end-of-run file
replaced by a folder, a damaged stale parquet, and a second resume at the same update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from monitor_helpers import monitored_update

from andrea_diag.monitor import SpikeMonitor

VOCAB = 11


def _run(out_dir: Path, updates: int = 2, **options) -> SpikeMonitor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with SpikeMonitor(model, opt, out_dir, lockin=False, **options) as mon:
        for _ in range(updates):
            monitored_update(mon, opt, model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean())
    return mon


def _updates(run: Path) -> list[int]:
    return [json.loads(line)["update"] for line in (run / "metrics.jsonl").open()]


def test_a_negative_last_update_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """It was taken as the resume point: the resumed run counted on from -4."""
    run = _run(tmp_path / "run").run_dir
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"update": -5, "loss": 1.0}\n')
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"records update -5, outside any run's 0 to"):
        _run(run, resume=True)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("name", ["eval.csv", "metrics.parquet", "summary.json"])
def test_an_end_of_run_file_that_is_a_folder_is_refused_before_anything_is_written(
    tmp_path: Path, name: str
) -> None:
    """It was found only when the earlier files were set aside, after the resumed run had
    taken the folder and rewritten its config.json."""
    run = _run(tmp_path / "run").run_dir
    (run / name).unlink(missing_ok=True)
    (run / name).mkdir()
    config = (run / "config.json").read_bytes()
    with pytest.raises(ValueError, match=f"{name} is a folder"):
        _run(run, resume=True)
    assert (run / "config.json").read_bytes() == config and not (run / ".lock").exists()


def test_a_damaged_stale_parquet_does_not_block_the_resume_that_removes_it(
    tmp_path: Path,
) -> None:
    """Its rows were counted by decoding the whole table: a damaged one refused the resume,
    though the resume deletes it and metrics.jsonl holds every row."""
    run = _run(tmp_path / "run").run_dir
    (run / "metrics.parquet").write_bytes(b"PAR1 damaged")
    _run(run, resume=True)
    assert _updates(run) == [1, 2, 3, 4]


def test_a_second_resume_at_the_same_update_keeps_both_earlier_summaries(tmp_path: Path) -> None:
    """The second set-aside overwrote the first's summary_to_update_N.json."""
    run = _run(tmp_path / "run").run_dir
    first = (run / "summary.json").read_text()
    _run(run, updates=0, resume=True)  # a resumed run stopped before its first update
    second = (run / "summary.json").read_text()
    _run(run, updates=0, resume=True)
    assert (run / "summary_to_update_2.json").read_text() == first
    assert (run / "summary_to_update_2-2.json").read_text() == second
