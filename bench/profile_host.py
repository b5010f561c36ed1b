"""Where the engine's host time goes, by Python function: cProfile over engine and plain updates.

    python3 bench/profile_host.py --size 12m --precision fp32 --updates 30 --out $OUT/host-12m-fp32.txt

On the H200 the update is host-bound (the GPU is busy 5.8 of 21 ms at 12m), so the host's
time per update *is* the update's time. torch.profiler counts aten ops; this counts the Python
that dispatches them: each ``andrea_diag`` function's cumulative time per update (its callees
included) and the top functions by own time, for the engine (``Trainer.train_update``, as
``bench-train`` builds it) and the plain loop. cProfile adds about a microsecond per Python
call, so the absolute figures are inflated alike in both loops; read the shares.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import pstats
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from andrea_diag.bench.train import PlainLoop, _engine
from andrea_diag.config import RunConfig


def _profiled(run: Callable[[], None], sync: Callable[[], None]) -> pstats.Stats:
    prof = cProfile.Profile()
    sync()
    prof.enable()
    run()
    sync()
    prof.disable()
    return pstats.Stats(prof)


def _table(stats: pstats.Stats, updates: int, label: str) -> str:
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--update-stats-every", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    total = a.warmup + 2 * a.updates
    cfg = RunConfig(size=a.size, precision=a.precision, device=a.device).resolve()
    cfg = dataclasses.replace(
        cfg,
        steps=total + 1,
        eval_every=0,
        checkpoint_every=0,
        inject=[],
        probes=dataclasses.replace(
            cfg.probes, lockin_every=total + 1, update_stats_every=a.update_stats_every
        ),
    )
    device = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        engine, batch_tokens = _engine(cfg, Path(tmp) / "engine")
        plain = PlainLoop(cfg, device)
        tokens = [batch_tokens(u) for u in range(1, total + 1)]
        for u in range(1, a.warmup + 1):
            engine.train_update(u)
            plain.update(tokens[u - 1])
        first = a.warmup + 1

        def run_engine() -> None:
            for u in range(first, first + a.updates):
                engine.train_update(u)

        def run_plain() -> None:
            for u in range(first + a.updates, total + 1):
                plain.update(tokens[u - 1])

        label = f"{a.size} {a.precision} update_stats_every={a.update_stats_every}"
        out = [
            _table(_profiled(run_engine, sync), a.updates, f"engine {label}"),
            _table(_profiled(run_plain, sync), a.updates, f"plain {label}"),
        ]
        engine.recorder.close()
        engine.recorder.release()
    a.out.write_text("\n\n".join(out))
    print("\n".join(line for line in "\n".join(out).splitlines() if line.startswith("=====")))


if __name__ == "__main__":
    main()
