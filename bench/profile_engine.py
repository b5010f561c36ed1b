"""Where one engine update spends its time, against the plain loop: a torch.profiler summary.

    python3 bench/profile_engine.py --size 12m --precision bf16 --updates 20 --out $OUT/prof-12m-bf16.txt

Builds the engine and the plain loop exactly as ``bench-train`` does (andrea_diag/bench/train.py),
warms both up, then profiles ``updates`` updates of each and writes, per loop: the top ops by
self CUDA time and by CPU time, and the host-sync counts per update (cudaStreamSynchronize,
cudaMemcpy*, aten::_local_scalar_dense = ``.item()``), all aten ops and kernel launches per update.
On the CPU (``--device cpu --size tiny``) the op counts are a proxy; tests/test_engine_syncs.py
counts the device reads themselves.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from andrea_diag.bench.train import PlainLoop, _engine
from andrea_diag.config import RunConfig

SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy",
            "aten::_local_scalar_dense", "aten::item", "cudaEventSynchronize", "aten::nonzero")  # fmt: skip


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="12m")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    total = a.warmup + 2 * a.updates
    cfg = RunConfig(size=a.size, precision=a.precision, device=a.device).resolve()
    cfg = dataclasses.replace(cfg, steps=total, eval_every=0, checkpoint_every=0)
    device = torch.device(a.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        engine, batch_tokens = _engine(cfg, Path(tmp) / "engine")
        plain = PlainLoop(cfg, device)
        tokens = [batch_tokens(u) for u in range(1, total + 1)]
        for u in range(1, a.warmup + 1):
            engine.train_update(u)
            plain.update(tokens[u - 1])
        sync()
        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=acts) as prof:
            for u in range(a.warmup + 1, a.warmup + a.updates + 1):
                engine.train_update(u)
            sync()
        out.append(_summary(prof, a.updates, f"engine {a.size} {a.precision}"))
        with profile(activities=acts) as prof:
            for u in range(a.warmup + a.updates + 1, total + 1):
                plain.update(tokens[u - 1])
            sync()
        out.append(_summary(prof, a.updates, f"plain {a.size} {a.precision}"))
        engine.recorder.close()
        engine.recorder.release()
    a.out.write_text("\n\n".join(out))
    print(
        "\n".join(
            line
            for line in "\n\n".join(out).splitlines()
            if "per update" in line or "=====" in line
        )
    )


if __name__ == "__main__":
    main()
