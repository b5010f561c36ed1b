"""Where one engine update spends its time, against the plain loop: torch.profiler or cProfile.

    python3 bench/profile_engine.py --size 12m --precision bf16 --updates 20 --out $OUT/prof-12m-bf16.txt
    python3 bench/profile_engine.py --host --size 12m --updates 30 --out $OUT/host-12m-fp32.txt

Builds the engine and the plain loop exactly as ``bench-train`` does (andrea_diag/bench/train.py),
warms both up, then profiles ``updates`` updates of each and writes, per loop:

- by default (torch.profiler): the top ops by self CUDA time and by CPU time, and the host-sync
  counts per update (cudaStreamSynchronize, cudaMemcpy*, aten::_local_scalar_dense = ``.item()``),
  all aten ops and kernel launches per update;
- ``--timeline`` (torch.profiler's device trace): the GPU's busy time per update (the union of
  its kernel and copy intervals) against the wall time, so whether the update is host-bound
  (the GPU idles) or device-bound; and the kernels the engine runs that the plain loop does not,
  by name, with their device time per update;
- ``--host`` (cProfile): each ``andrea_diag`` function's cumulative ms per update (its callees
  included) and the top functions by own time. On the H200 the update is host-bound, so the
  host's time per update *is* the update's time; this says which Python spends it. cProfile adds
  about a microsecond per Python call to both loops alike: read the shares.

On the CPU (``--device cpu --size tiny``) the op counts are a proxy; tests/test_engine_syncs.py
counts the device reads themselves.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import itertools
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from andrea_diag.bench.train import PlainLoop, _engine
from andrea_diag.config import RunConfig

SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy",
            "aten::_local_scalar_dense", "aten::item", "cudaEventSynchronize", "aten::nonzero")  # fmt: skip


def bench_config(a: argparse.Namespace, total: int) -> RunConfig:
    """The run bench-train times, for ``total`` updates: no evaluation, checkpoint or injection,
    the lock-in probe's one sample at the end, ``a``'s size, precision, device, schedule and
    ``--cuda-graph`` (bench/update_walls.py builds its engine with it too)."""
    cfg = RunConfig(size=a.size, precision=a.precision, device=a.device).resolve()
    probes = dataclasses.replace(cfg.probes, lockin_every=total + 1,  # once a run: at the end
                                 update_stats_every=a.update_stats_every,
                                 moment_norms_every=a.moment_norms_every)  # fmt: skip
    return dataclasses.replace(cfg, steps=total + 1, eval_every=0, checkpoint_every=0, inject=[],
                               probes=probes, cuda_graph=a.cuda_graph)  # fmt: skip


def _summary(prof: profile, updates: int, label: str) -> str:
    ka = prof.key_averages()
    lines = [f"===== {label}: {updates} updates"]
    for name in SYNC_OPS:
        n = sum(e.count for e in ka if e.key == name)
        lines.append(f"  {name:<30} {n / updates:8.2f} per update")
    # every aten op the host dispatched (nested ones included): the CPU proxy of launch cost
    n_aten = sum(e.count for e in ka if e.key.startswith("aten::"))
    n_launch = sum(e.count for e in ka if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC"))
    lines.append(f"  {'aten ops (all)':<30} {n_aten / updates:8.2f} per update")
    lines.append(f"  {'kernel launches':<30} {n_launch / updates:8.2f} per update")
    lines.append(ka.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=70))
    lines.append(ka.table(sort_by="cpu_time_total", row_limit=40, max_name_column_width=70))
    return "\n".join(lines)


def _profiled(run: Callable[[], None], sync: Callable[[], None]) -> pstats.Stats:
    prof = cProfile.Profile()
    sync()
    prof.enable()
    run()
    sync()
    prof.disable()
    return pstats.Stats(prof)


def _timed_gc(run: Callable[[], None], sync: Callable[[], None], updates: int) -> str:
    """``run`` unprofiled: its wall ms/update, and the garbage collector's share of it (a
    collection holds the host, and a pipelined host is only one update ahead)."""
    spent, started, counts = [0.0], [0.0], [0, 0, 0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - started[0]
            counts[info["generation"]] += 1

    gc.callbacks.append(on_gc)
    try:
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        wall = time.perf_counter() - t0
    finally:
        gc.callbacks.remove(on_gc)
    return (f"  unprofiled {wall / updates * 1e3:.3f} ms/update; garbage collection "
            f"{spent[0] / updates * 1e3:.3f} ms/update (collections by generation {counts})")  # fmt: skip


def _host_table(stats: pstats.Stats, updates: int, label: str) -> str:
    """The andrea_diag functions by cumulative ms/update, then everything by own ms/update."""
    rows = stats.stats  # type: ignore[attr-defined]  # {(file, line, fn): (cc, nc, tt, ct, callers)}
    total = max(ct for (_f, _l, _n), (_cc, _nc, _tt, ct, _c) in rows.items())
    lines = [f"===== {label}: {updates} updates, {total / updates * 1e3:.2f} ms/update profiled"]
    lines.append("-- andrea_diag functions, cumulative ms/update (callees included)")
    ours = [
        (ct, nc, f"{f.split('andrea_diag/')[-1]}:{ln} {fn}")
        for (f, ln, fn), (_cc, nc, _tt, ct, _c) in rows.items()
        if "andrea_diag" in f
    ]
    for ct, nc, name in sorted(ours, reverse=True)[:60]:
        lines.append(f"  {ct / updates * 1e3:8.3f} ms  {nc / updates:7.1f} calls  {name}")
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(45)
    lines.append("-- top functions by own time (all updates)")
    lines.append(buf.getvalue())
    return "\n".join(lines)


def _profile_ops(
    run: Callable[[], None], sync: Callable[[], None], updates: int, label: str
) -> str:
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts) as prof:
        run()
        sync()
    return _summary(prof, updates, label)


def _device_intervals(prof: profile) -> list[tuple[float, float, str]]:
    """(start us, end us, name) of every device-side event (kernels, copies, sets)."""
    out = []
    for e in prof.events():
        if (
            e.device_type == torch.autograd.DeviceType.CUDA
            and e.time_range.end > e.time_range.start
        ):
            out.append((float(e.time_range.start), float(e.time_range.end), e.name))
    return sorted(out)


def _busy(iv: list[tuple[float, float, str]]) -> tuple[float, float]:
    """(union of the intervals, their span) in microseconds."""
    busy, cur_s, cur_e = 0.0, None, None
    for s, e, _ in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy, (iv[-1][1] - iv[0][0]) if iv else 0.0


def _gaps(iv: list[tuple[float, float, str]], updates: int, top: int = 12) -> str:
    """Where the device waits: idle time between consecutive device events, summed by the
    (event before, event after) pair (names cut short), per update, the largest first."""
    seen: dict[tuple[str, str], tuple[int, float]] = {}
    end, prev = None, ""
    for s, e, n in iv:
        if end is not None and s > end + 2.0:  # under 2 us: launch spacing, not a wait
            c, t = seen.get((prev, n[:60]), (0, 0.0))
            seen[(prev, n[:60])] = (c + 1, t + s - end)
        if end is None or e > end:
            end, prev = e, n[:60]
    lines = ["-- device idle by the events around it, us/update (count/update)"]
    for (a, b), (c, t) in sorted(seen.items(), key=lambda x: -x[1][1])[:top]:
        lines.append(f"  {t / updates:8.1f} us ({c / updates:5.2f})  {a}  ->  {b}")
    return "\n".join(lines)


def _by_name(iv: list[tuple[float, float, str]]) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for s, e, n in iv:
        c, t = out.get(n, (0, 0.0))
        out[n] = (c + 1, t + e - s)
    return out


def _launchers(prof: profile, pattern: str, updates: int) -> str:
    """Which op (its input shapes and dtypes, and the andrea_diag frames above it) launched the
    kernels whose name holds ``pattern``: eager only (a graph's replayed kernels have no op)."""
    seen: dict[tuple[str, str, str], int] = {}
    for e in prof.events():
        if not any(pattern in k.name for k in getattr(e, "kernels", [])):
            continue
        frames = [f for f in (e.stack or []) if "andrea_diag" in f or "bench/" in f][:3]
        key = (e.name, str(e.input_shapes)[:80], " < ".join(frames)[:200])
        seen[key] = seen.get(key, 0) + 1
    lines = [f"-- launchers of kernels like {pattern!r} (per update)"]
    for (name, shapes, frames), c in sorted(seen.items(), key=lambda x: -x[1])[:12]:
        lines.append(f"  {c / updates:6.2f}  {name} {shapes}  {frames}")
    return "\n".join(lines)


def _profile_timeline(
    run: Callable[[], None],
    sync: Callable[[], None],
    updates: int,
    label: str,
    patterns: tuple[str, ...] = (),
) -> tuple[str, dict[str, tuple[int, float]]]:
    """Busy against wall per update, and the kernels by name (for the engine-minus-plain table);
    ``patterns``: kernel names whose launching ops to list (eager)."""
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    sync()
    with profile(activities=acts, record_shapes=bool(patterns), with_stack=bool(patterns)) as prof:
        t0 = time.perf_counter()
        run()
        sync()
        wall = (time.perf_counter() - t0) * 1e6
    iv = _device_intervals(prof)
    busy, span = _busy(iv)
    n = max(updates, 1)
    text = (f"===== {label}: {updates} updates (timeline)\n"
            f"  wall {wall / n / 1e3:.3f} ms/update (profiled); device span "
            f"{span / n / 1e3:.3f}, device busy {busy / n / 1e3:.3f} ms/update "
            f"({busy / max(span, 1e-9):.1%} of the span); {len(iv) / n:.1f} device events/update")  # fmt: skip
    text += "\n" + _gaps(iv, n)
    for pat in patterns:
        text += "\n" + _launchers(prof, pat, n)
    return text, _by_name(iv)


def _extra_kernels(
    eng: dict[str, tuple[int, float]], plain: dict[str, tuple[int, float]], updates: int
) -> str:
    """The engine's device events beyond the plain loop's, by name: count and us per update."""
    rows = []
    for name in set(eng) | set(plain):
        ce, te = eng.get(name, (0, 0.0))
        cp, tp = plain.get(name, (0, 0.0))
        rows.append(((te - tp) / updates, (ce - cp) / updates, name))
    rows.sort(reverse=True)
    lines = ["-- engine minus plain, device us/update and events/update, by name (top 40)"]
    lines += [f"  {dt:9.2f} us  {dc:7.2f}  {_short(name)}" for dt, dc, name in rows[:40]]
    return "\n".join(lines)


def _short(name: str, width: int = 180) -> str:
    """A kernel's name without the namespaces that every aten kernel shares: the multi-tensor
    kernels differ only in their functor, which sits past the first 110 characters."""
    for noise in ("void ", "at::native::", "(anonymous namespace)::", "at_cuda_detail::", "std::"):
        name = name.replace(noise, "")
    return name[:width]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--update-stats-every", type=int, default=1)
    p.add_argument("--moment-norms-every", type=int, default=10)  # the CLI's default
    p.add_argument("--host", action="store_true", help="cProfile by Python function")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="device busy time against wall time, and the engine's extra kernels",
    )
    p.add_argument("--launchers", nargs="*", default=[],
                   help="with --timeline, eager: the ops that launch kernels named like these")  # fmt: skip
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--cuda-graph", action="store_true",
                   help="the engine graphed and pipelined, the plain loop graphed")  # fmt: skip
    a = p.parse_args()
    total = a.warmup + 4 * a.updates  # --host runs each loop twice: profiled, then timed
    cfg = bench_config(a, total)
    device = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        engine, batch_tokens = _engine(cfg, Path(tmp) / "engine")
        plain = PlainLoop(cfg, device, graphed=a.cuda_graph)
        tokens = [batch_tokens(u) for u in range(1, total + 1)]
        for u in range(1, a.warmup + 1):
            engine.pipeline.advance(u)  # pipelined under --cuda-graph, as bench-train runs it
            plain.update(tokens[u - 1])
        engine.pipeline.drain()
        engine_u = itertools.count(a.warmup + 1)  # the engine's next updates, in order
        plain_u = itertools.count(a.warmup + 2 * a.updates + 1)

        def run_engine() -> None:
            for _ in range(a.updates):
                engine.pipeline.advance(next(engine_u))
            engine.pipeline.drain()

        def run_plain() -> None:
            for _ in range(a.updates):
                plain.update(tokens[next(plain_u) - 1])

        label = f"{a.size} {a.precision} update_stats_every={a.update_stats_every}"
        label += " --cuda-graph" if a.cuda_graph else ""
        out = []
        kernels = {}
        for name, run in (("engine", run_engine), ("plain", run_plain)):
            if a.timeline:
                text, kernels[name] = _profile_timeline(
                    run, sync, a.updates, f"{name} {label}", tuple(a.launchers)
                )
                out.append(text)
            elif a.host:
                out.append(_host_table(_profiled(run, sync), a.updates, f"{name} {label}"))
                out.append(_timed_gc(run, sync, a.updates))
            else:
                out.append(_profile_ops(run, sync, a.updates, f"{name} {label}"))
        if a.timeline:
            out.append(_extra_kernels(kernels["engine"], kernels["plain"], a.updates))
        engine.recorder.close()
        engine.recorder.release()
    a.out.write_text("\n\n".join(out))
    text = "\n".join(out).splitlines()
    if a.timeline:  # short: all of it
        print("\n".join(text))
        return
    print("\n".join(line for line in text if "per update" in line or line.startswith("=====")))


if __name__ == "__main__":
    main()
