"""Per-update wall times of the engine beside the plain loop: where the slow updates are, and why.

    python3 bench/update_walls.py --cuda-graph --size 12m --precision bf16 --updates 120 --out $OUT/walls.txt

bench-train's blocks of 20 updates average the engine's time; on the H200 two blocks in six
were 5-10 ms longer than the rest at 12m (reports/bench-train/h200-2026-12-02d/), the blocks
holding updates 50 and 100. This runs both loops one update at a time, alternating, with no
sync inside the timed updates (as bench-train's blocks), and writes for each engine update:

- its host wall time (from the start of its ``advance`` to the start of the next one's);
- the time inside the recorder's flush (``Recorder.flush``: the probes' deferred reads, the
  rows' encoding, the write and its fsync), the part of it in ``write_many``, and in that
  ``rows_to_host``, ``encode`` (the rows' JSON) and ``fsync`` (which may run on the metrics
  writer's worker thread, jsonl.SyncBehind, and then lands in whichever update is running);
- the garbage collector's time in it, by generation;
- with ``--phases``, the host time of each part of the pipelined update (``Pipeline.advance``'s
  steps, each probe's hooks, and the wait for the read, ``HostCopy.wait``), as a table of means:
  whether the host or the device bounds the update, and which Python is the host's share;

then the slowest updates, and the mean with and without them. The plain loop's walls are
beside them. The device work of an update runs behind the host's, so a host stall shows as a
long wall on the update that waits (the sync) and those after it.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from profile_engine import bench_config  # bench/ is on the path: run as a script

from andrea_diag import jsonl
from andrea_diag.bench.train import PlainLoop, _engine
from andrea_diag.jsonl import JsonlWriter


class Spans:
    """Wall seconds spent inside wrapped callables since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0

        return timed

    def take(self) -> dict[str, float]:
        out, self.spent = self.spent, {}
        return out


def _gc_timer(spans: Spans) -> None:
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            key = f"gc{info['generation']}"
            spans.spent[key] = spans.spent.get(key, 0.0) + time.perf_counter() - started[0]

    gc.callbacks.append(on_gc)


def _walls(
    steps: list[Callable[[], Any]], spans: Spans, sync: Callable[[], None]
) -> list[tuple[float, dict[str, float]]]:
    """Each step's wall (start to the next start) and its spans; one sync after the last."""
    marks, parts = [], []
    for step in steps:
        marks.append(time.perf_counter())
        spans.take()
        step()
        parts.append(spans.take())
    sync()
    marks.append(time.perf_counter())
    return [(b - a, p) for a, b, p in zip(marks[:-1], marks[1:], parts, strict=True)]


PHASES = ("_batch", "_accumulate", "_reduce_and_clip", "_measure", "_context", "_finish_row")
HOOKS = ("after_clip", "after_step", "launch_after_clip", "launch_after_step", "resolve",
         "resolve_ready")  # fmt: skip


def _wrap_phases(engine: Any, spans: Spans) -> None:
    """Wrap the trainer's steps, the pipeline's, the step runner's, each probe's hooks and the
    read's wait, on the instances (so that the plain loop is untouched)."""
    from andrea_diag.device import HostCopy

    for name in PHASES:
        setattr(engine, name, spans.wrap(name, getattr(engine, name)))
    pipe = engine.pipeline
    pipe.drain = spans.wrap("drain", pipe.drain)
    engine.steps.step_unless = spans.wrap("step_unless", engine.steps.step_unless)
    engine.scheduler.step = spans.wrap("scheduler.step", engine.scheduler.step)
    engine.plan.prefetch = spans.wrap("prefetch", engine.plan.prefetch)
    engine.recorder.log = spans.wrap("recorder.log", engine.recorder.log)
    HostCopy.wait = spans.wrap("HostCopy.wait", HostCopy.wait)
    for probe in engine.probes.probes:
        for hook in HOOKS:
            if hasattr(probe, hook):
                label = f"{type(probe).__name__}.{hook}"
                setattr(probe, hook, spans.wrap(label, getattr(probe, hook)))


def _phase_table(eng: list[tuple[float, dict[str, float]]]) -> str:
    """Mean host ms per update of each span over the timed updates, largest first."""
    n = len(eng)
    total: dict[str, float] = {}
    for _, parts in eng:
        for k, v in parts.items():
            total[k] = total.get(k, 0.0) + v
    wall = sum(w for w, _ in eng) / n * 1e3
    lines = [f"-- host ms per update by part (mean of {n}; the wall {wall:.3f} ms; parts nest)"]
    for k, v in sorted(total.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {v / n * 1e3:8.3f}  {k}")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--updates", type=int, default=120)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--update-stats-every", type=int, default=10)
    p.add_argument("--moment-norms-every", type=int, default=10)  # the CLI's default
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument(
        "--phases",
        action="store_true",
        help="also time each part of the pipelined update and each probe's hooks",
    )
    a = p.parse_args()
    total = a.warmup + a.updates
    cfg = bench_config(a, total)
    device = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    spans = Spans()
    with tempfile.TemporaryDirectory() as tmp:
        engine, batch_tokens = _engine(cfg, Path(tmp) / "engine")
        plain = PlainLoop(cfg, device, graphed=a.cuda_graph)
        tokens = [batch_tokens(u) for u in range(1, total + 1)]
        rec = engine.recorder
        rec.flush = spans.wrap("flush", rec.flush)
        JsonlWriter.write_many = spans.wrap("write_many", JsonlWriter.write_many)
        jsonl.rows_to_host = spans.wrap("rows_to_host", jsonl.rows_to_host)
        jsonl.encode_rows = spans.wrap("encode", jsonl.encode_rows)
        os.fsync = spans.wrap("fsync", os.fsync)  # on the worker thread where it runs behind
        _gc_timer(spans)
        if a.phases:
            _wrap_phases(engine, spans)
        for u in range(1, a.warmup + 1):
            engine.pipeline.advance(u)
            plain.update(tokens[u - 1])
        engine.pipeline.drain()
        sync()
        us = range(a.warmup + 1, total + 1)
        eng = _walls([lambda u=u: engine.pipeline.advance(u) for u in us], spans, sync)
        pla = _walls([lambda u=u: plain.update(tokens[u - 1]) for u in us], spans, sync)
        engine.pipeline.drain()
        rec.close()
        rec.release()
    text = _table(a, list(us), eng, pla)
    if a.phases:
        text = text.replace("-- every update", _phase_table(eng) + "-- every update", 1)
    a.out.write_text(text)
    print(a.out.read_text().split("\n-- every update")[0])


def _table(a: argparse.Namespace, us: list[int], eng: list, pla: list) -> str:
    ms = [w * 1e3 for w, _ in eng]
    med = statistics.median(ms)
    slow = [i for i, m in enumerate(ms) if m > 1.5 * med]
    rest = [m for i, m in enumerate(ms) if i not in slow]
    pms = [w * 1e3 for w, _ in pla]
    lines = [
        f"===== {a.size} {a.precision} --update-stats-every {a.update_stats_every}"
        f" --moment-norms-every {a.moment_norms_every}"
        f"{' --cuda-graph' if a.cuda_graph else ''}: {len(us)} updates, after {a.warmup}",
        f"  engine mean {statistics.fmean(ms):.3f} ms, median {med:.3f}, without the "
        f"{len(slow)} over 1.5x the median {statistics.fmean(rest or [0.0]):.3f}",
        f"  plain mean {statistics.fmean(pms):.3f} ms, median {statistics.median(pms):.3f}",
        "-- the slow engine updates: update, wall ms, then ms inside flush / write_many / gc0-2",
    ]
    for i in slow:
        parts = " ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(eng[i][1].items()))
        lines.append(f"  {us[i]:5d} {ms[i]:8.3f}  {parts}")
    lines.append("-- every update: update, engine ms, plain ms, engine spans")
    for i, u in enumerate(us):
        parts = " ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(eng[i][1].items()))
        lines.append(f"  {u:5d} {ms[i]:8.3f} {pms[i]:8.3f}  {parts}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
