"""Data-parallel replicas (D > 1): process launch, the DDP reducer, and the batch slice.

    andrea-diag cascade --nproc 2            # two worker processes (gloo on CPU, NCCL on GPUs)
    torchrun --nproc-per-node 2 -m andrea_diag.cli cascade ...   # works too

Document 002's rules, as this module keeps them:

- **The same sequences whatever D is.** The batch plan draws m×A×D sequences per update (the
  trainer builds it with micro_batch m·D); replica r trains on its own slice ``[r·m, (r+1)·m)`` of
  every microbatch, so D=2, m=4 trains on exactly the sequences of D=1, m=8.
- **One global denominator.** The group's supervised tokens are all-reduced *before* the first
  microbatch, and every replica divides its token-loss sums by that global count.
- **No averaging.** DDP averages gradients over replicas (divides by D); the loss is multiplied
  by D at backward to compensate, so the reduced gradient is the single-process full-batch one.
- ``no_sync()`` covers forward and backward of every microbatch but the last, so gradients are
  all-reduced once per update, overlapped with the last backward.
- Every replica then holds the same gradient, so every replica computes the same clip norm and
  takes the same skip decision; only rank 0 writes the run directory.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from andrea_diag.errors import UserError

# CPU replicas (gloo) per core, and the least allowed on any machine: D workers emulate D GPUs,
# so a small laptop may still run the 8 of one GPU node
CPU_WORKERS_PER_CORE = 4
MIN_CPU_WORKERS = 8
# NVLink multicast stays off on the lent GPU machines (shared/DEVICE.md): set in every worker.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_world_size() -> int:
    """Processes in this run, as ``--nproc`` or torchrun set them up (1: not distributed)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def init_from_env(device_type: str) -> DistInfo:
    """Join the process group that ``--nproc`` or torchrun set up (no-op for one process)."""
    world = env_world_size()
    if world <= 1:
        return DistInfo()
    for key, value in NO_MULTICAST.items():
        os.environ.setdefault(key, value)
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    info = DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    if device_type == "cuda":
        if torch.cuda.device_count() < info.world_size:
            raise UserError(
                f"--nproc {info.world_size} needs {info.world_size} GPUs, "
                f"{torch.cuda.device_count()} visible"
            )
        torch.cuda.set_device(info.local_rank)
    return info


def check_world(nproc: int, device_type: str) -> None:
    """Refuse, before any process starts, a ``--nproc`` this host cannot run: more replicas
    than visible GPUs (one per GPU), or on the CPU more gloo workers than ``CPU_WORKERS_PER_CORE``
    per core (each holds a torch and a model: a config saying 1000 would fork 1000 of them)."""
    if device_type == "cuda":
        have = torch.cuda.device_count()
        if nproc > have:
            raise UserError(f"--nproc {nproc} needs {nproc} GPUs, {have} visible",
                            hint="one replica per GPU: give --nproc at most the GPU count")  # fmt: skip
        return
    cores = os.cpu_count() or 1
    cap = max(MIN_CPU_WORKERS, CPU_WORKERS_PER_CORE * cores)
    if nproc > cap:
        raise UserError(
            f"--nproc {nproc} is more CPU worker processes than this machine runs ({cores} cores: "
            f"at most {cap})",
            hint="the batch is m*A*D sequences: raise --accum instead of --nproc for a larger one",
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(local_rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world),
        **NO_MULTICAST,
    )
    try:
        fn(*args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(nproc: int, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` in ``nproc`` spawned processes joined by a fresh rendezvous.

    ``fn`` and ``args`` must be picklable (a module-level function). A worker's exception
    propagates here as ``torch.multiprocessing.ProcessRaisedException``.
    """
    if nproc < 1:
        raise UserError(f"--nproc must be at least 1, got {nproc}")
    torch.multiprocessing.start_processes(
        _worker, args=(nproc, _free_port(), fn, args), nprocs=nproc, start_method="spawn"
    )


def replica_slice(tokens: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """(A, m·D, T+1) -> this replica's (A, m, T+1): microbatch columns [r·m, (r+1)·m)."""
    if tokens.size(1) % info.world_size:
        raise ValueError(f"{tokens.size(1)} sequences per microbatch do not split over D")
    m = tokens.size(1) // info.world_size
    return tokens[:, info.rank * m : (info.rank + 1) * m]


def gather_examples(local: torch.Tensor, info: DistInfo, accum: int) -> torch.Tensor:
    """Per-example values of every replica, in the single-process order (A, m·D) flattened."""
    if info.world_size == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(info.world_size)]
    dist.all_gather(parts, local.contiguous())
    stacked = torch.stack(parts).reshape(info.world_size, accum, -1)  # (D, A, m)
    return stacked.transpose(0, 1).reshape(-1)  # (A, D, m) -> the order of the full batch


class DDPReducer:
    """DistributedDataParallel with ``no_sync`` and the global token denominator."""

    def __init__(self, model: torch.nn.Module, info: DistInfo, device: torch.device) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.info = info
        self.world_size, self.rank = info.world_size, info.rank
        ids = [device.index] if device.type == "cuda" else None
        self.module = DistributedDataParallel(model, device_ids=ids)

    @contextlib.contextmanager
    def microbatch(self, last: bool) -> Iterator[None]:
        with contextlib.nullcontext() if last else self.module.no_sync():
            yield

    def global_tokens(self, local: int, device: torch.device) -> int:
        t = torch.tensor([local], dtype=torch.long, device=device)
        dist.all_reduce(t)
        return int(t.item())  # host sync: one per group, the denominator every replica uses

    def local_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        """This replica's microbatch columns of the group's host tokens."""
        return replica_slice(tokens, self.info)

    def backward_factor(self) -> float:
        return float(self.world_size)  # undoes DDP's average: the gradient is the global sum

    def reduce(self, params: list[torch.nn.Parameter]) -> None:
        """DDP all-reduced during the last backward; nothing is left to do."""
        del params

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        out = value.detach().clone()
        dist.all_reduce(out)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("world_size", self.world_size) != self.world_size:
            raise UserError(
                f"this run was saved with D={state['world_size']} replicas, not {self.world_size}"
            )
