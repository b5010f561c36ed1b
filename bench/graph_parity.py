"""How far ``--cuda-graph`` moves an engine's metrics: the same arm eager and graphed, row by row.

    python3 bench/graph_parity.py --size 12m --precision bf16 --updates 60 --out $OUT/parity-12m-bf16.json

Builds the engine twice as ``bench-train`` does (same seed, batches, clipper and probes; the
lock-in sample and evaluation off), trains ``updates`` updates in each, flushes, and compares
every float column of every row: the largest absolute and relative difference per column, and
the number of rows where they differ at all. A graph replays the eager kernels in the eager
order, so a difference, if any, comes from a kernel that is not deterministic run to run or
that picks another algorithm under capture; this measures it (issue 20 item 4). CUDA only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from andrea_diag.bench.train import _engine
from andrea_diag.config import RunConfig


def _rows(cfg: RunConfig, run_dir: Path, updates: int) -> tuple[list[dict[str, Any]], dict]:
    engine, _ = _engine(cfg, run_dir)
    # as a run steps (train/pipeline.py): graphed, an update's host part follows the next group
    rows = [r for u in range(1, updates + 1) for r in engine.pipeline.advance(u)]
    rows += engine.pipeline.drain()
    counts = dict(engine.groups.counts) | {"pipelined": engine.pipeline.counts["pipelined"]}
    engine.recorder.flush()  # the probes' device columns join the rows
    engine.recorder.close()
    engine.recorder.release()
    return rows, counts


def compare(eager: list[dict[str, Any]], graph: list[dict[str, Any]]) -> dict[str, Any]:
    """Per float column: max |a - b|, max |a - b| / |a|, and how many rows differ."""
    cols: dict[str, dict[str, float]] = {}
    for e, g in zip(eager, graph, strict=True):
        for col, a in e.items():
            b = g.get(col)
            if not (isinstance(a, float) and isinstance(b, float)) or col == "time_s":
                continue
            if col.endswith("_ms") or col == "unix_time_s":  # timings, not metrics
                continue
            c = cols.setdefault(col, {"max_abs": 0.0, "max_rel": 0.0, "rows_differing": 0})
            if a == b or (math.isnan(a) and math.isnan(b)):
                continue
            diff = abs(a - b)
            c["max_abs"] = max(c["max_abs"], diff)
            c["max_rel"] = max(c["max_rel"], diff / abs(a) if a else math.inf)
            c["rows_differing"] += 1
    return cols


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    base = RunConfig(size=a.size, precision=a.precision, device="cuda").resolve()
    base = dataclasses.replace(base, steps=a.updates + 1, eval_every=0, checkpoint_every=0,
                               inject=[], probes=dataclasses.replace(base.probes, lockin=False))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        eager, _ = _rows(base, Path(tmp) / "eager", a.updates)
        again, _ = _rows(base, Path(tmp) / "again", a.updates)  # eager's own run-to-run noise
        graph, counts = _rows(
            dataclasses.replace(base, cuda_graph=True), Path(tmp) / "g", a.updates
        )
    cols = compare(eager, graph)
    differing = {k: v for k, v in cols.items() if v["rows_differing"]}
    noise = {k: v for k, v in compare(eager, again).items() if v["rows_differing"]}
    # against the second (warm) eager run too: no first-run-in-the-process effect on either side
    warm = {k: v for k, v in compare(again, graph).items() if v["rows_differing"]}
    result = {
        "size": a.size, "precision": a.precision, "updates": a.updates, "groups": counts,
        "columns_compared": len(cols), "columns_differing": len(differing),
        "identical": not differing, "differing": differing,
        "eager_twice_identical": not noise, "eager_twice_differing": noise,
        "graph_vs_second_eager_differing": warm,
    }  # fmt: skip
    a.out.write_text(json.dumps(result, indent=2))
    worst = max((v["max_rel"] for v in differing.values()), default=0.0)
    print(f"{a.size} {a.precision}: {len(cols)} columns over {a.updates} updates, "
          f"{len(differing)} differ (eager twice: {len(noise)}); worst relative difference "
          f"{worst:.3g}; groups {counts}")  # fmt: skip


if __name__ == "__main__":
    main()
