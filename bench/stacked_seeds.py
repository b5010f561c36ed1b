"""K seeds in one set of kernels against one seed's graphed plain loop, side by side (issue 20 item 3).

    python3 bench/stacked_seeds.py --size 12m --precision bf16 --ks 1,2,4,8,16 --out $OUT/stacked-12m-bf16.json

What it measures and how: andrea_diag/bench/stacked.py. Prints one line per loop: ms per
update, seed-updates per second, the ratio to the plain loop, and MFU. On the CPU it runs the
same code eagerly (a check that it runs, not a figure).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from andrea_diag.bench.stacked import bench_stacked
from andrea_diag.config import RunConfig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="12m")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--ks", default="1,2,4,8", help="seeds per stack, comma-separated")
    ap.add_argument("--updates", type=int, default=60, help="timed updates of every loop")
    ap.add_argument("--warmup", type=int, default=6, help="untimed updates first (captures)")
    ap.add_argument("--block", type=int, default=10, help="updates per timed block")
    # plain: one clipped arm (the fused clipper); the stacks clip every other row (a cell's two
    # arms) and take every row's norm, as the engine records an unclipped arm's norm too
    ap.add_argument("--clip", default="global", help="the plain loop's clip mode")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True, help="the result's JSON file")
    a = ap.parse_args()
    try:
        ks = tuple(int(k) for k in a.ks.split(","))
        cfg = RunConfig(size=a.size, precision=a.precision, device=a.device, clip=a.clip,
                        cuda_graph=a.device.startswith("cuda")).resolve()  # fmt: skip
        result = bench_stacked(cfg, ks, a.updates, a.warmup, a.block, progress=print)
    except ValueError as exc:
        print(f"stacked_seeds: error: {exc}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    m = result["meta"]
    print(
        f"== {m['size']} {m['precision']} on {m['gpu'] or m['device']}, graphed {m['cuda_graph']}"
    )
    for r in result["loops"]:
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        print(f"{r['loop']:<11} {r['ms_per_update']:8.2f} ms/update {r['seed_updates_per_s']:8.1f}"
              f" seed-updates/s {r['ratio_vs_plain']:5.2f}x plain  MFU {mfu}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
