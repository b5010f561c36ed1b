"""The sweep: one cascade per cell, a table of every arm, resume without losing finished cells."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from nvml_stub import fake_nvml
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.experiments import gpu_busy
from andrea_diag.report.sweep_page import findings

ARGS = ["sweep", "--size", "tiny", "--lr", "1e-3,1e-2", "--steps", "6"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "s"
    res = CliRunner().invoke(app, [*ARGS, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_sweep_writes_one_row_per_arm_and_a_page(sweep_dir: Path) -> None:
    table = pd.read_csv(sweep_dir / "sweep.csv")
    assert len(table) == 4
    assert sorted(table["lr"].unique()) == [1e-3, 1e-2]
    assert set(table["clip"]) == {"none", "global"}
    page = (sweep_dir / "sweep.html").read_text()
    assert "tiny-lr0.001-mn1-s0/report.html" in page and "Findings" in page
    for cell in table["cell"].unique():
        assert json.loads((sweep_dir / cell / "cascade.json").read_text())["status"] == "done"


def test_a_sweep_on_the_cpu_records_no_gpu_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--device cpu: no GPU of the host is read, even where NVML would answer (a stand-in that
    reads 50% on every GPU), so a CPU sweep on a GPU host says nothing about its GPU."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(util=[50]))
    out = tmp_path / "s"
    res = CliRunner().invoke(app, [*ONE_CELL, "--out", str(out)])
    assert res.exit_code == 0, res.output
    tp = json.loads((out / "sweep.json").read_text())["throughput"]
    assert tp["updates"] > 0 and "gpu_busy" not in tp
    assert "a kernel ran" not in (out / "sweep.html").read_text()
    assert "GPU busy" not in res.output


def test_rerun_keeps_finished_cells_and_continues_unfinished_ones(sweep_dir: Path) -> None:
    done = sweep_dir / "tiny-lr0.001-mn1-s0" / "none" / "metrics.jsonl"
    before = done.stat().st_mtime_ns
    unfinished = sweep_dir / "tiny-lr0.01-mn1-s0"
    meta = json.loads((unfinished / "cascade.json").read_text())
    (unfinished / "cascade.json").write_text(json.dumps({**meta, "status": "running"}))
    kept_arm = unfinished / "none" / "metrics.jsonl"
    kept_before = kept_arm.stat().st_mtime_ns
    (unfinished / "global" / "summary.json").unlink()  # the second arm stopped before its end
    res = CliRunner().invoke(app, [*ARGS, "--out", str(sweep_dir)])
    assert res.exit_code == 0, res.output
    assert done.stat().st_mtime_ns == before  # finished cell untouched
    assert kept_arm.stat().st_mtime_ns == kept_before  # the finished arm of the cell is kept
    assert (unfinished / "global" / "summary.json").exists()  # the stopped arm finished
    assert "global: continuing from ckpt-0000005.pt" in res.output  # from its checkpoint
    assert len(pd.read_parquet(unfinished / "global" / "metrics.parquet")) == 6  # no duplicate
    assert json.loads((unfinished / "cascade.json").read_text())["status"] == "done"


def test_merge_only_trains_nothing_and_lists_the_cells_it_lacks_as_not_run(
    sweep_dir: Path, tmp_path: Path
) -> None:
    """Cells brought back from other machines are tabulated; nothing missing is trained."""
    import shutil

    out = tmp_path / "merged"
    shutil.copytree(sweep_dir, out)
    half = out / "tiny-lr0.01-mn1-s0"  # a cell stopped part-way: left exactly as it is
    meta = json.loads((half / "cascade.json").read_text())
    (half / "cascade.json").write_text(json.dumps({**meta, "status": "running"}))
    files = {p: p.stat().st_mtime_ns for p in out.glob("tiny-*/**/*") if p.is_file()}
    assert len(files) > 20  # both cells' arms
    res = CliRunner().invoke(app, [*ARGS, "--seed", "0,1", "--merge-only", "--out", str(out)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "sweep.csv")
    status = table.groupby("cell")["status"].first().to_dict()
    assert status == {"tiny-lr0.001-mn1-s0": "done", "tiny-lr0.01-mn1-s0": "not run",
                      "tiny-lr0.001-mn1-s1": "not run", "tiny-lr0.01-mn1-s1": "not run"}  # fmt: skip
    assert not (out / "tiny-lr0.001-mn1-s1").exists()  # nothing trained for the missing seed
    assert json.loads((half / "cascade.json").read_text())["status"] == "running"
    assert not (half / "global" / "ckpt-0000006.pt").exists()
    assert all(p.stat().st_mtime_ns == t for p, t in files.items())
    assert "not finished, not run" in res.output
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["status"] == "partial" and len(meta["not_run_cells"]) == 3
    assert (out / "sweep.html").is_file()  # a partial merge still has its page


def test_sweep_findings_report_one_seed_gaps_without_calling_them() -> None:
    rows = []
    for lr, u, c in [(1e-3, 3.0, 3.05), (1e-2, 8.9, 4.0), (3e-2, 3.0, 4.0)]:
        for clip, loss in (("none", u), ("global", c)):
            rows.append({"cell": f"c{lr}", "size": "12m", "lr": lr, "max_norm": 1.0, "seed": 0,
                         "clip": clip, "final_loss": loss, "min_loss": loss - 0.5,
                         "n_spikes": 3 if clip == "none" else 0,
                         "max_grad_norm": 5.0, "lockin": "healthy"})  # fmt: skip
    text = "\n".join(findings(pd.DataFrame(rows)))
    assert "12m lr 0.001 (max_norm 1, 1 seed): gap -0.05 nats, within 0.25 (3.00 vs 3.05); " \
           "insufficient seeds: 1 pair at 12m lr 0.001 (a call needs ≥ 6)" in text  # fmt: skip
    # one seed per arm: a gap is reported, never called (issue 19's minimum of 6 pairs)
    assert "12m lr 0.01 (max_norm 1, 1 seed): insufficient seeds: 1 pair at 12m lr 0.01" in text
    assert "clipping helped 4.90 nats in this one run" in text
    assert "12m lr 0.03 (max_norm 1, 1 seed): insufficient seeds: 1 pair" in text
    assert "clipping cost 1.00 nats in this one run" in text
    assert "(never learned): 12m lr 0.01 none" in text
    assert "no arm locked into repetition" in text


def test_sweep_rejects_a_bad_list() -> None:
    res = CliRunner().invoke(app, ["sweep", "--lr", "1e-3,fast"])
    assert res.exit_code != 0 and "--lr" in res.output and "Traceback" not in res.output


def test_sweep_findings_make_no_call_when_the_paired_interval_straddles_zero() -> None:
    rows = []
    for seed, (u, c) in enumerate([(3.0, 1.5), (2.0, 2.5)]):
        for clip, loss in (("none", u), ("global", c)):
            rows.append({"cell": "c", "size": "12m", "lr": 1e-3, "max_norm": 1.0, "seed": seed,
                         "clip": clip, "final_loss": loss, "min_loss": 1.0, "n_spikes": 0,
                         "max_grad_norm": 1.0, "lockin": "healthy"})  # fmt: skip
    text = "\n".join(findings(pd.DataFrame(rows)))
    # paired gaps +1.5 and -0.5: two seeds, no call; the mean gap is reported as such
    assert "12m lr 0.001 (max_norm 1, 2 seeds): insufficient seeds: 2 pairs at 12m lr 0.001 " \
           "(a call needs ≥ 6)" in text  # fmt: skip
    assert "clipping helped 0.50 nats on average over 2 seeds" in text


def _seeded_rows(gaps: list[float]) -> pd.DataFrame:
    rows = []
    for seed, gap in enumerate(gaps):
        for clip, loss in (("none", 3.0 + gap), ("global", 3.0)):
            rows.append({"cell": f"c{seed}", "size": "12m", "lr": 1e-3, "max_norm": 1.0,
                         "seed": seed, "precision": "fp32", "clip": clip,
                         "final_eval_loss": loss, "final_loss": loss, "min_loss": 1.0,
                         "n_spikes": 0, "max_grad_norm": 1.0, "lockin": "healthy",
                         "final_v_share": 0.0, "status": "done"})  # fmt: skip
    return pd.DataFrame(rows)


def test_sweep_findings_call_a_planted_gap_from_6_seeds_with_its_p_value() -> None:
    from andrea_diag.report.sweep_page import intervals_section

    table = _seeded_rows([0.30, 0.25, 0.40, 0.35, 0.28, 0.31])
    text = "\n".join(findings(table))
    assert "12m lr 0.001 (max_norm 1, 6 seeds): clipping helped (sign-flip p = 0.031, 6 pairs)" \
           ": paired held-out loss gap +0.315 nats, 95% t [+0.259, +0.371]" in text  # fmt: skip
    section = intervals_section(table)
    assert "clipping helped (sign-flip p = 0.031, 6 pairs)" in section
    assert "collapse none 0/6" in section and "(Fisher p = 1)" in section


def test_sweep_findings_give_the_detectable_gap_when_6_seeds_show_nothing() -> None:
    text = "\n".join(findings(_seeded_rows([0.40, -0.10, 0.30, -0.05, 0.02, -0.60])))
    assert "not distinguishable from 0 with 6 pairs (sign-flip p = " in text
    assert "smallest detectable gap " in text and "0.02 nats would need " in text
    assert "clipping helped" not in text and "clipping cost" not in text


def test_resuming_with_other_settings_is_refused(sweep_dir: Path) -> None:
    res = CliRunner().invoke(app, [*ARGS[:-1], "7", "--out", str(sweep_dir)])  # --steps 7
    assert res.exit_code != 0 and "other settings" in res.output and "steps 6 -> 7" in res.output


def test_a_kept_cell_trained_with_another_mixer_is_refused(sweep_dir: Path) -> None:
    """cascade.json does not hold the mixer: each arm's saved config is checked too."""
    res = CliRunner().invoke(app, [*ARGS, "--mixer", "exp3", "--out", str(sweep_dir)])
    assert res.exit_code != 0 and "other options" in res.output and "mixer" in res.output


def test_precision_is_an_axis_of_the_grid_and_fp32_cells_keep_their_old_names() -> None:
    from andrea_diag.experiments.sweep import SweepSpec, cells, name_of

    spec = SweepSpec(sizes=["tiny"], lrs=[1e-3], seeds=[0, 1], precisions=["fp32", "fp16"])
    names = [name_of(c) for c in cells(spec)]
    assert names == ["tiny-lr0.001-mn1-s0", "tiny-lr0.001-mn1-s1",
                     "tiny-lr0.001-mn1-s0-fp16", "tiny-lr0.001-mn1-s1-fp16"]  # fmt: skip
    assert [c.precision for c in cells(spec)] == ["fp32", "fp32", "fp16", "fp16"]


def test_sweep_rejects_an_unknown_precision_or_plotly_mode_before_any_work() -> None:
    res = CliRunner().invoke(app, ["sweep", "--precision", "fp32,fp64", "--steps", "1"])
    assert res.exit_code != 0 and "precision 'fp64'" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["sweep", "--plotly", "cdn", "--steps", "1"])
    assert res.exit_code != 0 and "--plotly" in res.output and "Traceback" not in res.output


def test_sweep_page_escapes_every_value_from_sweep_json(tmp_path: Path) -> None:
    from andrea_diag.report.sweep_page import render_sweep

    meta = {"sizes": ["12m"], "lrs": [1e-3], "steps": "<b>6</b>", "recipe": "v1",
            "seeds": ["<i>0</i>"], "command": "<script>x</script>", "plotly": "inline",
            "throughput": {"updates_per_s": 2.0, "updates": "<u>", "wall_s": 1.0,
                           "executor": "local", "jobs": "<j>"}}  # fmt: skip
    page = render_sweep(tmp_path, _seeded_rows([0.1] * 6), meta).read_text()
    for raw in ("<b>6</b>", "<i>0</i>", "<script>x</script>", "<u>", "<j>"):
        assert raw not in page
    assert "&lt;b&gt;6&lt;/b&gt; updates per arm" in page and "--jobs &lt;j&gt;" in page


ONE_CELL = ["sweep", "--size", "tiny", "--lr", "1e-3", "--steps", "4", "--clip", "none",
            "--device", "cpu"]  # fmt: skip


@pytest.mark.parametrize(
    ("util", "seeds", "says"),
    [(96, "0", "a kernel ran nearly all the time, so more cells at once (--jobs) have little idle"),
     (41, "0,1", "no kernel ran 59% of the time; more cells at once (--jobs) may raise throughput"),
     (41, "0", "no kernel ran 59% of the time; every cell already ran at once, so more cells in "
      "one sweep (seeds, lrs) may raise throughput")],
)  # fmt: skip
def test_a_sweep_whose_gpu_was_read_records_gpu_busy_and_says_what_it_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, util: int, seeds: str, says: str
) -> None:
    """The cells train on the CPU; the seam that names the cells' GPUs says GPU 0, and a
    stand-in NVML reads ``util`` there every time: the mean is ``util`` whatever the count.
    Two cells at --jobs 1 ran one at a time (--jobs could add one); one cell ran all there was."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(util=[util]))
    monkeypatch.setattr(gpu_busy, "cell_gpus", lambda cfg, device: [0])
    out = tmp_path / "s"
    res = CliRunner().invoke(app, [*ONE_CELL, "--seed", seeds, "--out", str(out)])
    assert res.exit_code == 0, res.output
    busy = json.loads((out / "sweep.json").read_text())["throughput"]["gpu_busy"]
    assert (busy["pct_mean"], busy["pct_min"], busy["pct_max"]) == (util, util, util)
    assert busy["n_samples"] >= 1 and "devices" not in busy  # one GPU: no per-GPU breakdown
    assert busy["source"] == gpu_busy.SOURCE
    said = " ".join(res.output.split())  # the console wraps long lines
    assert f"GPU busy {util}% of the sweep (NVML, {busy['n_samples']} samples): {says}" in said
    page = (out / "sweep.html").read_text()
    n = busy["n_samples"]
    assert f"a kernel ran on the GPU {util}% of the time (NVML, {n} samples)" in page


def test_a_rerun_that_trains_nothing_keeps_the_measured_throughput_and_reads_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cell already done: the re-run trained nothing, so an idle GPU says nothing about
    --jobs (seen on the H200: "GPU busy 0% ... may raise throughput" after a resumed sweep),
    and the figures the first run measured are kept, not replaced by 0 updates."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(util=[0]))
    monkeypatch.setattr(gpu_busy, "cell_gpus", lambda cfg, device: [0])
    out = tmp_path / "s"
    first = CliRunner().invoke(app, [*ONE_CELL, "--out", str(out)])
    assert first.exit_code == 0, first.output
    measured = json.loads((out / "sweep.json").read_text())["throughput"]
    assert measured["updates"] > 0 and "gpu_busy" in measured
    again = CliRunner().invoke(app, [*ONE_CELL, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "sweep.json").read_text())["throughput"] == measured
    assert "GPU busy" not in again.output
