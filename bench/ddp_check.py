"""Data-parallel replicas on the GPUs: equality with one process, and the measured scaling.

    (on a 2-GPU device, repo root)  python3 bench/ddp_check.py OUT_DIR [size] [steps]

1. Equality: D=2·m=8 against D=1·m=16 (the same 16 sequences per microbatch, checked by batch
   hash), 3 updates, full fp32 matmuls (``matmul_precision="highest"``): relative difference of
   the loss and the pre-clip gradient norm per update.
2. Scaling, TF32 matmuls as in a default run: median ms per update (updates 11..N) for D=1·m=16,
   D=2·m=8 (same global batch: strong scaling) and D=2·m=16 (twice the batch: weak scaling),
   with tokens per second.

Writes ``ddp-check.json`` under OUT_DIR and prints it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console

from andrea_diag.config import RunConfig
from andrea_diag.experiments.cascade import CascadeSpec, load_data, run_cascade

DEVICE = os.environ.get("DDP_CHECK_DEVICE", "cuda")  # cpu: a dry run of the script here
SEQ = int(os.environ.get("DDP_CHECK_SEQ", "256"))


def _run(base: RunConfig, out: Path, data: object, **kw: object) -> pd.DataFrame:
    cfg = dataclasses.replace(base, **kw)
    run_cascade(CascadeSpec(base=cfg, clips=["global"], out=out), Console(stderr=True), data=data)
    return pd.read_json(out / "global" / "metrics.jsonl", lines=True)


def main(out: Path, size: str = "12m", steps: int = 200) -> dict:
    console = Console(stderr=True)
    base = RunConfig(size=size, clip="global", device=DEVICE, seq_len=SEQ)
    data = load_data(base, console)
    result: dict = {"size": size}
    exact = dataclasses.replace(base, steps=3, matmul_precision="highest")
    one = _run(exact, out / "eq-d1-m16", data, micro_batch=16)
    two = _run(exact, out / "eq-d2-m8", data, micro_batch=8, replicas=2)
    result["equality"] = {
        "same_batches": one["batch_hash"].tolist() == two["batch_hash"].tolist(),
        "loss_rel_diff": ((one["loss"] - two["loss"]).abs() / one["loss"].abs()).tolist(),
        "grad_norm_rel_diff": (
            (one["grad_norm"] - two["grad_norm"]).abs() / one["grad_norm"].abs()
        ).tolist(),
    }
    timing = dataclasses.replace(base, steps=steps)
    scaling = {}
    for name, kw in (("d1-m16", {"micro_batch": 16}), ("d2-m8", {"micro_batch": 8, "replicas": 2}),
                     ("d2-m16", {"micro_batch": 16, "replicas": 2})):  # fmt: skip
        df = _run(timing, out / f"t-{name}", data, **kw)
        ms = 1e3 * float(df["time_s"].iloc[10:].median())
        tokens = int(df["tokens"].iloc[-1] - df["tokens"].iloc[-2])
        scaling[name] = {"ms_per_update": ms, "tokens_per_update": tokens,
                         "tokens_per_s": tokens / (ms / 1e3)}  # fmt: skip
    ref = scaling["d1-m16"]
    for v in scaling.values():
        v["updates_per_s_vs_d1"] = ref["ms_per_update"] / v["ms_per_update"]
        v["tokens_per_s_vs_d1"] = v["tokens_per_s"] / ref["tokens_per_s"]
    result["scaling"] = scaling
    (out / "ddp-check.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(sys.argv[2:3] or ["12m"]), *map(int, sys.argv[3:4]))
