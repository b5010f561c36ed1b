"""Would the norms of Adam's ``m`` and ``v`` hide behind the next group on a second stream?

    python3 bench/overlap_norms.py --size 120m --precision bf16 --out $OUT/overlap-120m-bf16.txt

At 120m bf16 the engine's per-update norms of ``m`` and ``v`` (the optimizer-state probe, on
the clipper's norm pass) take 0.215 ms of device time, read at the HBM's bandwidth, behind an
update of about 11.2 ms whose forward and backward are matmuls
(reports/bench-train/h200-2026-12-03b/). This measures, before any engine change, what they
cost the graphed plain loop of bench-train in three ways, in alternating blocks of
``--block`` updates between two syncs:

- ``plain``: the loop alone;
- ``serial``: the norms after each update's step, on the same stream (what the engine does);
- ``side``: the norms on a low-priority second stream that waits for the step, while the next
  update's group runs; the next step waits for them (it overwrites ``m`` and ``v``).

It prints each way's ms per update and its cost over ``plain``. CUDA only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from profile_engine import bench_config  # bench/ is on the path: run as a script

from andrea_diag.bench.train import PlainLoop, _engine
from andrea_diag.probes.optstate_reads import tensor_norms


def _moments(loop: PlainLoop) -> list[torch.Tensor]:
    state = [loop.optimizer.state[p] for p in loop.params]
    return [s["exp_avg"] for s in state] + [s["exp_avg_sq"] for s in state]


def _ways(loop: PlainLoop, tokens: list[torch.Tensor]) -> dict[str, Callable[[int], None]]:
    """One update of each way, by name (``u``: the update's 1-based index into ``tokens``)."""
    # CUDA: a lower number is a higher priority; 0, the default, is the lowest. The loop runs
    # on a stream of the highest priority (see main), so the group's blocks go before the norms'
    side = torch.cuda.Stream(priority=0)
    main = torch.cuda.current_stream()
    step = loop.steps.step

    def serial(u: int) -> None:
        loop.update(tokens[u - 1])
        tensor_norms(_moments(loop), fused=True)

    def step_after_side(applied: bool) -> None:
        main.wait_stream(side)  # the norms of the step before have read m and v
        step(applied)

    def beside(u: int) -> None:
        loop.steps.step = step_after_side
        try:
            loop.update(tokens[u - 1])
        finally:
            loop.steps.step = step
        side.wait_stream(main)  # after this step
        with torch.cuda.stream(side):
            tensor_norms(_moments(loop), fused=True)

    return {"plain": lambda u: loop.update(tokens[u - 1]), "serial": serial, "side": beside}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="120m")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--updates", type=int, default=120)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--block", type=int, default=20)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.device, a.cuda_graph, a.update_stats_every = "cuda", True, 10
    total = a.warmup + a.updates * 3
    cfg = bench_config(a, total)
    device = torch.device("cuda")
    with tempfile.TemporaryDirectory() as tmp:  # the engine only for the plan's batches
        engine, batch_tokens = _engine(cfg, Path(tmp) / "run")
        tokens = [batch_tokens(u).to(device) for u in range(1, total + 1)]
        engine.recorder.close()
        engine.recorder.release()
    del engine
    high = torch.cuda.Stream(priority=-100)  # mapped to the highest the device allows
    with torch.cuda.stream(high):
        text = _measure(a, cfg, device, tokens)
    a.out.write_text(text)
    print(text)


def _measure(a: argparse.Namespace, cfg: object, device: torch.device, tokens: list) -> str:
    loop = PlainLoop(cfg, device, graphed=True)  # type: ignore[arg-type]
    ways = _ways(loop, tokens)
    for u in range(1, a.warmup + 1):
        ways["serial"](u)
    times: dict[str, list[float]] = {k: [] for k in ways}
    u = a.warmup
    for _ in range(a.updates // a.block):
        for name, way in ways.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.block):
                u += 1
                way(u)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) * 1e3 / a.block)
    base = statistics.fmean(times["plain"])
    lines = [f"===== {a.size} {a.precision}, graphed plain loop, blocks of {a.block}"]
    for name, ms in times.items():
        mean = statistics.fmean(ms)
        blocks = ", ".join(f"{x:.3f}" for x in ms)
        lines.append(f"  {name:7s} {mean:8.3f} ms/update  +{mean - base:6.3f}  ({blocks})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
