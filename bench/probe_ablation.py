"""What each default probe costs inside bench-train's own blocks: the ratio with one probe (or
one of its options) turned off at a time, side by side in one process.

    python3 bench/probe_ablation.py --size 12m --precision bf16 --out $OUT/ablation-12m-bf16.json

bench-train times each probe's hooks in a block of their own (``ProbeDriver.time_hooks``), which
says what the host spends, not what the update loses on the device. This runs
:func:`~andrea_diag.bench.train.bench_train` (``--cuda-graph --plain same`` by default, the
issue's 120 timed updates in blocks of 20 after 15) once per variant, in the order given, and
writes each variant's ``speed_vs_plain`` and ms/update. The default config runs first and
last, so a drift within the call shows. A diagnostic: the published ratio is bench-train's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from andrea_diag import probes as registry
from andrea_diag.bench.train import bench_train
from andrea_diag.bench.train_checks import host_speed
from andrea_diag.config import RunConfig
from andrea_diag.probes import spike_bound
from andrea_diag.train import measure

# name -> ProbeConfig fields changed from the default; "drop": registered probes left out (the
# spike probe stays: the optimizer-state probe's pipelined copies take its decision)
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-shadow": {"shadow": False},
    "no-layers": {"per_layer": False},
    "no-update-stats": {"update_stats": False},
    "no-lockin": {"lockin": False},
    "norms-every-1": {"moment_norms_every": 1},
    "all-off": {"shadow": False, "per_layer": False, "update_stats": False, "lockin": False},
    "no-optstate": {"drop": ("optstate",)},
    "spikes-only": {"drop": ("optstate", "layers", "lockin")},
    # the pipelined spike and skip flags through torch's ops instead of k_spike_flag and
    # k_skip_flag (one launch each)
    "torch-flags": {"torch_flag": True},
}


@contextlib.contextmanager
def torch_flag(on: bool) -> Iterator[None]:
    """The spike and skip flags from torch's ops (the CPU's path) where ``on``, for one variant."""
    saved = spike_bound._kernel_flag, measure.skip_flag
    if on:
        spike_bound._kernel_flag, measure.skip_flag = (lambda *a: None), measure.torch_skip_flag
    try:
        yield
    finally:
        spike_bound._kernel_flag, measure.skip_flag = saved


@contextlib.contextmanager
def without(names: tuple[str, ...]) -> Iterator[None]:
    """The probe registry with ``names`` left out, for one engine's build."""
    kept = {n: registry.PROBES.pop(n) for n in names}
    try:
        yield
    finally:
        registry.PROBES.update(kept)


def run_variant(a: argparse.Namespace, changes: dict[str, Any]) -> dict[str, Any]:
    """One bench-train result for the default config with ``changes`` to its probes."""
    cfg = RunConfig(size=a.size, precision=a.precision, device=a.device,
                    cuda_graph=a.device == "cuda").resolve()  # fmt: skip
    fields = {k: v for k, v in changes.items() if k not in ("drop", "torch_flag")}
    cfg = dataclasses.replace(cfg, probes=dataclasses.replace(cfg.probes, **fields))
    with without(changes.get("drop", ())), torch_flag(changes.get("torch_flag", False)):
        res = bench_train(cfg, updates=a.updates, warmup=a.warmup, block=a.block, plain="same")
    return {
        "changes": changes,
        "speed_vs_plain": res["speed_vs_plain"],
        "engine_ms": res["engine"]["ms_per_update"],
        "plain_ms": res["plain"]["ms_per_update"],
        "blocks_ms": res["blocks_ms"],
        "probes": res["probes"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--updates", type=int, default=120)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--block", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--variants", nargs="*", default=[*VARIANTS, "default"],
                   choices=list(VARIANTS))  # fmt: skip
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    out: list[dict[str, Any]] = []
    for name in a.variants:
        row = {"variant": name, **run_variant(a, VARIANTS[name])}
        out.append(row)
        print(f"{name:<16} speed {row['speed_vs_plain']:.4f}  engine {row['engine_ms']:.3f} ms  "
              f"plain {row['plain_ms']:.3f} ms", flush=True)  # fmt: skip
        head = {"size": a.size, "precision": a.precision, **host_speed()}
        a.out.write_text(json.dumps({**head, "rows": out}, indent=1))  # each row as it lands


if __name__ == "__main__":
    main()
