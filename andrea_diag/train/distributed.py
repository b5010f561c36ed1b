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
import re
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


# torchrun (and --nproc's workers) set these; a value is a plain count, ASCII digits only:
# int() would also take " 2", "+2", "2_0" and other scripts' digits, and read "abc" as a traceback
_COUNT = re.compile(r"[0-9]{1,9}")
_UNSET = "unset them to run one process, or start the run with --nproc or torchrun"


def _env_count(name: str) -> int | None:
    """``name``'s value in the environment as a count (None: unset); anything else is one line."""
    value = os.environ.get(name)
    if value is None:
        return None
    if not _COUNT.fullmatch(value):
        raise UserError(f"{name}={value!r} in the environment is not a whole number", hint=_UNSET)
    return int(value)


def _world_size() -> int:
    world = _env_count("WORLD_SIZE")
    if world == 0:
        raise UserError("WORLD_SIZE=0 in the environment: a run needs at least 1 process",
                        hint=_UNSET)  # fmt: skip
    return 1 if world is None else world


def env_world() -> DistInfo:
    """This process's place in the run, from the environment ``--nproc`` or torchrun set up:
    ``DistInfo()`` (one process) when neither ``WORLD_SIZE`` nor ``RANK`` is set.

    The one reader of those variables; what no launcher sets is one line, never a traceback
    or a partial run: a value that is not a whole number, ``WORLD_SIZE`` 0, ``RANK`` at or past
    ``WORLD_SIZE``, ``WORLD_SIZE`` above 1 without ``RANK`` (the rendezvous would fail after
    the run dir was written), ``RANK`` without ``WORLD_SIZE`` (rank 5 of 1: it would train as
    one process and write nothing), ``LOCAL_RANK`` past ``WORLD_SIZE``. ``WORLD_SIZE=1``
    alone is one process: it has a single rank. Above 1, torch's rendezvous needs
    ``MASTER_ADDR`` and ``MASTER_PORT``, which the launchers set."""
    world, rank = _world_size(), _env_count("RANK")
    if rank is None and world > 1:
        raise UserError(f"WORLD_SIZE={world} is set in the environment but RANK is not",
                        hint=_UNSET)  # fmt: skip
    if rank is not None and "WORLD_SIZE" not in os.environ:
        raise UserError(f"RANK={rank} is set in the environment but WORLD_SIZE is not",
                        hint=_UNSET)  # fmt: skip
    rank = rank or 0
    if rank >= world:
        raise UserError(f"RANK={rank} in the environment is not below WORLD_SIZE={world}",
                        hint="ranks run from 0 to WORLD_SIZE - 1")  # fmt: skip
    if world == 1:
        return DistInfo()
    local = _env_count("LOCAL_RANK")  # read only where it is used: D > 1
    if local is not None and local >= world:
        raise UserError(f"LOCAL_RANK={local} in the environment is not below WORLD_SIZE={world}",
                        hint="local ranks run from 0 to the processes per host - 1")  # fmt: skip
    if not dist.is_initialized():  # a group already joined needs no rendezvous
        _check_rendezvous(world)
    return DistInfo(rank, world, local or 0)


def _check_rendezvous(world: int) -> None:
    """torch's env:// rendezvous needs ``MASTER_ADDR`` and ``MASTER_PORT``; without them it
    raises a traceback at the first arm, after the run dir was written."""
    port = _env_count("MASTER_PORT")
    if "MASTER_ADDR" not in os.environ or port is None or not 0 < port < 65536:
        raise UserError(
            f"WORLD_SIZE={world} needs MASTER_ADDR and MASTER_PORT (a port from 1 to 65535) "
            "in the environment",
            hint=_UNSET,
        )


def env_world_size() -> int:
    """Processes in this run, as ``--nproc`` or torchrun set them up (1: not distributed).

    ``WORLD_SIZE`` alone, checked as :func:`env_world` checks it: a config's pre-flight
    (``check_runnable``) asks only how many processes there are. The rest is checked by
    :func:`env_rank` (``cascade`` and ``train`` read it before anything else) and by
    :func:`init_from_env`, which every trainer calls."""
    return _world_size()


def check_one_process(command: str) -> None:
    """``command`` starts its cells' processes itself: under a launcher (``WORLD_SIZE`` above 1,
    torchrun or ``--nproc``) each rank would run the whole grid, and the first cell's
    rendezvous waited for ranks that run something else, forever, after its folder was made."""
    world = _world_size()
    if world > 1:
        if _env_count("RANK") is None:
            env_world()  # WORLD_SIZE without RANK is no launcher's: its own line says so
        raise UserError(f"{command} runs as one process, not under a launcher (WORLD_SIZE={world})",
                        hint="run it directly: --jobs N runs cells side by side, --nproc D gives "
                        "each cell D replicas")  # fmt: skip


def env_rank() -> int:
    """This process's rank (0: the one that writes), with every check of :func:`env_world`."""
    return env_world().rank


def init_from_env(device_type: str) -> DistInfo:
    """Join the process group that ``--nproc`` or torchrun set up (no-op for one process)."""
    env = env_world()
    if env.world_size <= 1:
        return DistInfo()
    for key, value in NO_MULTICAST.items():
        os.environ.setdefault(key, value)
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    info = DistInfo(dist.get_rank(), dist.get_world_size(), env.local_rank)
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
