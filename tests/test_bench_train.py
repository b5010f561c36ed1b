"""``andrea-diag bench-train`` on the CPU: the JSON's fields and the page, no timing claims.

python -m pytest -q tests/test_bench_train.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.bench.train import peak_tflops
from andrea_diag.cli import app


def test_bench_train_writes_both_loops_the_ratio_probe_costs_and_a_page(tmp_path: Path) -> None:
    out = tmp_path / "bt"
    args = ["bench-train", "--size", "tiny", "--device", "cpu", "--updates", "2", "--warmup",
            "1", "--block", "1", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    result = json.loads((out / "bench-train.json").read_text())
    for arm in ("engine", "plain"):
        assert result[arm]["ms_per_update"] > 0 and result[arm]["tokens_per_s"] > 0
        assert result[arm]["mfu"] is None  # the CPU has no peak in the table: MFU n/a
        assert len(result["blocks_ms"][arm]) == 2  # two alternating blocks of one update
    engine, plain = result["engine"]["ms_per_update"], result["plain"]["ms_per_update"]
    assert result["engine_over_plain"] == pytest.approx(engine / plain, rel=1e-12)
    assert result["speed_vs_plain"] == pytest.approx(plain / engine, rel=1e-12)
    tokens = result["meta"]["tokens_per_update"]
    assert result["engine"]["tokens_per_s"] == pytest.approx(tokens / (engine / 1e3))
    probes = {p["probe"] for p in result["probes"]}
    assert {"spikes", "optstate"} <= probes  # the default probes were on, and timed
    assert all(p["ms_per_update"] >= 0 for p in result["probes"])
    assert result["meta"]["size"] == "tiny" and result["meta"]["updates"] == 2
    assert "--size tiny" in result["meta"]["command"]
    # the host on record beside the ratios it moves (a host-bound update runs at its pace)
    assert result["meta"]["host_python_loop_ms"] > 0 and result["meta"]["host_cpu"]
    page = (out / "bench-train.html").read_text()
    assert "bench-train: CPU, tiny fp32" in page and "MFU n/a" in page


def test_peak_flops_table_picks_the_precision_and_knows_only_listed_gpus() -> None:
    assert peak_tflops("NVIDIA H200", "bf16", "high") == 989.0
    assert peak_tflops("NVIDIA H200", "fp32", "high") == 494.0  # TF32 tensor cores allowed
    assert peak_tflops("NVIDIA H200", "fp32", "highest") == 67.0
    assert peak_tflops(None, "bf16", "high") is None  # CPU
    assert peak_tflops("NVIDIA A10", "bf16", "high") is None  # not in the table: MFU n/a


def test_bench_train_rejects_zero_updates(tmp_path: Path) -> None:
    args = ["bench-train", "--size", "tiny", "--device", "cpu", "--updates", "0",
            "--out", str(tmp_path / "bt")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "Traceback" not in res.output
    # typer's own bound, turned into the toolkit's one line (commands/errors.py)
    assert res.output.count("error:") == 1 and "'--updates'" in res.output
    assert "greater than or equal to 1" in res.output


def test_mfu_is_the_models_flops_per_token_times_tokens_per_s_over_the_peak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    import torch

    from andrea_diag.bench import train as bench
    from andrea_diag.config import RunConfig

    monkeypatch.setattr(bench, "peak_tflops", lambda *a: 989.0)  # as on an H200, bf16
    cfg = RunConfig(size="12m", device="cpu").resolve()
    times = {"engine": [400.0, 600.0], "plain": [300.0, 300.0]}  # ms per block of one update
    result = bench._result(cfg, torch.device("cpu"), times, {}, 2, 0, 1)
    flops = cfg.model.flops_per_token(cfg.seq_len)  # the one formula (presets.py)
    assert result["meta"]["flops_per_token"] == flops
    tokens = cfg.micro_batch * cfg.accum * cfg.seq_len
    for arm, ms in (("engine", 500.0), ("plain", 300.0)):
        assert result[arm]["mfu"] == pytest.approx(flops * tokens / (ms / 1e3) / 989e12, rel=1e-12)


def test_the_page_of_a_cuda_graph_run_shows_all_four_loops_and_both_ratios() -> None:
    from andrea_diag.report.bench_train_page import render_bench_train_page

    # a published H200 result (bench/device_graph.sh): the four loops of one process
    src = Path(__file__).parent.parent / "reports/bench-train/h200-2026-12-01c/bt-12m-fp32-e1.json"
    # (--plain all); a two-loop --plain eager result labels its plain loop eager
    result = json.loads(src.read_text())
    page = render_bench_train_page(result)
    for label in ("engine (graphed)", "plain (graphed)", "engine (eager)", "plain (eager)"):
        assert label in page
    assert f"<b>{result['speed_vs_plain_eager']:.3f}x</b> the eager plain loop" in page
    assert f"{result['eager_speed_vs_plain_eager']:.3f}x" in page


def test_bench_train_cuda_graph_off_cuda_is_one_line(tmp_path: Path) -> None:
    args = ["bench-train", "--cuda-graph", "--device", "cpu", "--out", str(tmp_path / "bt")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.output.count("error:") == 1 and "--cuda-graph needs a CUDA device" in res.output
    assert not (tmp_path / "bt").exists()


def test_the_page_labels_an_eager_plain_loop_beside_a_graphed_engine() -> None:
    from andrea_diag.report.bench_train_page import render_bench_train_page

    root = Path(__file__).parent.parent / "reports/bench-train/h200-2026-12-01c/two-loop"
    page = render_bench_train_page(json.loads((root / "bt-12m-fp32-eager.json").read_text()))
    assert "engine (graphed)" in page and "<td>plain</td>" in page
    assert "plain (graphed)" not in page and "engine (eager)" not in page


def test_a_graph_still_to_come_after_the_warmup_is_refused_not_timed() -> None:
    from types import SimpleNamespace as NS

    from andrea_diag.bench.train_checks import check_captured
    from andrea_diag.errors import UserError

    def engine(
        group: object,
        step: object,
        probe: object,
        graphed: bool = True,
        every: int = 1,
        stats_every: int = 10,
        stats: bool = True,
    ) -> NS:
        probes = [NS(graphs=NS(graph=probe), moment_norms_every=every, update_stats=stats,
                     update_stats_every=stats_every)]  # fmt: skip
        return NS(cfg=NS(cuda_graph=graphed), groups=NS(graph=group),
                  steps=NS(graph=step, graphed=True), probes=NS(probes=probes))  # fmt: skip

    check_captured([engine(1, 1, 1), engine(None, None, None, graphed=False)], 15)
    with pytest.raises(UserError, match="after --warmup 15 updates the optimizer step graph"):
        check_captured([engine(1, None, 1)], 15)  # v2's lr warm-up: the step comes later
    with pytest.raises(UserError, match="the group, optimizer-state probe graph is not"):
        check_captured([engine(None, 1, None)], 15)
    # the moments' norms on the update stats' schedule: those updates run eagerly, and the
    # probe's graph comes with a spike's window of updates
    check_captured([engine(1, 1, None, every=10)], 15)
    with pytest.raises(UserError, match="the group graph is not"):
        check_captured([engine(None, 1, None, every=10)], 15)
    with pytest.raises(UserError, match="the optimizer-state probe graph is not"):
        check_captured([engine(1, 1, None, every=10, stats_every=3)], 15)  # graphed on schedule
    # without update stats, the norms' own schedule is too sparse to capture in the warm-up
    check_captured([engine(1, 1, None, every=10, stats=False)], 15)
    with pytest.raises(UserError, match="the optimizer-state probe graph is not"):
        check_captured([engine(1, 1, None, every=1, stats=False)], 15)


def test_the_probes_hooks_are_timed_in_an_engine_block_after_the_timed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two CUDA events a hook call are host work of their own: none inside the timed blocks."""
    from andrea_diag.bench import train
    from andrea_diag.probes.driver import ProbeDriver

    order: list[str] = []
    timed, time_hooks = train._timed_blocks, ProbeDriver.time_hooks

    def blocks(*args: object, **kw: object) -> dict[str, list[float]]:
        order.append("timed blocks")
        return timed(*args, **kw)  # type: ignore[arg-type]

    def hooks(self: ProbeDriver, device: object) -> None:
        order.append("hook timing")
        time_hooks(self, device)  # type: ignore[arg-type]

    monkeypatch.setattr(train, "_timed_blocks", blocks)
    monkeypatch.setattr(ProbeDriver, "time_hooks", hooks)
    args = ["bench-train", "--size", "tiny", "--device", "cpu", "--updates", "3", "--warmup",
            "1", "--block", "2", "--out", str(tmp_path / "bt")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert order == ["timed blocks", "hook timing"]
    result = json.loads((tmp_path / "bt" / "bench-train.json").read_text())
    assert result["meta"]["probe_hook_updates"] == 2  # one block of the engine alone
    assert sum(len(b) for b in result["blocks_ms"].values()) == 4  # 2 blocks x 2 arms, no more
    optstate = next(p for p in result["probes"] if p["probe"] == "optstate")
    engine_ms = result["engine"]["ms_per_update"]
    assert optstate["share_of_engine"] == pytest.approx(optstate["ms_per_update"] / engine_ms)


def test_a_pipelined_engines_timed_block_finishes_as_many_updates_as_it_launches() -> None:
    """A block of k advances holds k launches and k host parts, the last one's host part in the
    next block (overlapped, as in a run): no drain with the device idle at each block's end."""
    import itertools

    import torch

    from andrea_diag.bench import train

    log: list[tuple[str, int]] = []

    class Piped:  # the pipeline's shape: advance(u) launches u and finishes the one before
        pending: int | None = None

        def advance(self, u: int) -> None:
            if self.pending is not None:
                log.append(("finish", self.pending))
            log.append(("launch", u))
            self.pending = u

    pipe = Piped()
    pipe.advance(1)  # the warm-up's last update, still launched
    marks = [len(log)]
    arms = {"engine": pipe.advance, "plain": lambda u: None}
    times = train._timed_blocks(
        torch.device("cpu"), arms, 1, 6, 3, lambda _: marks.append(len(log))
    )
    assert [len(t) for t in times.values()] == [2, 2]
    blocks = [log[a:b] for a, b in itertools.pairwise(marks)]
    assert [sorted(b) for b in blocks] == [
        [("finish", 1), ("finish", 2), ("finish", 3), ("launch", 2), ("launch", 3), ("launch", 4)],
        [("finish", 4), ("finish", 5), ("finish", 6), ("launch", 5), ("launch", 6), ("launch", 7)],
    ]
    assert pipe.pending == 7, "the last timed update's host part is the caller's, untimed"
