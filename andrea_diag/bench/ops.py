"""Aten ops and device reads per update, the engine against the plain loop: the CPU's proxy
for a GPU update's launch overhead and host syncs (issue 20).

    PYTHONPATH=$PWD python -m andrea_diag.bench.ops --size tiny --updates 4
    PYTHONPATH=$PWD python -m andrea_diag.bench.ops --size 12m --updates 2 --warmup 2

    from andrea_diag.bench.ops import count_ops
    result = count_ops(cfg, updates=4)   # {"engine": {...}, "plain": {...}}

Both loops are built as ``bench-train`` builds them (:mod:`andrea_diag.bench.train`) and run
under :class:`DeviceTaint`, a ``TorchDispatchMode`` that sees every aten op the host dispatches
(forward, backward, optimizer and probes; composite ops are seen as what they decompose into)
and counts them by name.

**Device reads.** On a GPU, reading a device value on the host (``.item()``, ``float(t)``,
``bool(t)``, ``.tolist()``, ``.cpu()``, ``.numpy()``, a boolean-mask index: ``nonzero``) makes
the CPU wait for the GPU. On the CPU nothing waits, so the mode tracks which tensors *would* be on
the device: the model's parameters and buffers, the batch as :func:`to_device` hands it over,
and every op output computed from one of those (grads, optimizer state, probe buffers: the
warm-up runs under the mode so they are marked as they are made). A read of a marked tensor is
one device read, with the line of ``andrea_diag`` that did it. Host tensors (the batch before
the copy, the source labels, values already read) are free, as they are on the GPU. Not seen:
host-to-device copies of Python values (``torch.tensor(x, device=...)``, blocking on CUDA),
which the CPU cannot tell from host tensors; ``bench/profile_engine.py`` counts them on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
import traceback
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from andrea_diag.config import RunConfig
from andrea_diag.rundir import atomic_write_text

READ_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "equal"})
READ_METHODS = ("tolist", "numpy", "cpu")  # host reads that dispatch nothing on the CPU


def _site() -> str:
    """The innermost ``andrea_diag`` frame outside this module: who read the device."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "andrea_diag" in frame.filename and not frame.filename.endswith("bench/ops.py"):
            return f"{frame.filename.split('andrea_diag/')[-1]}:{frame.lineno} {frame.name}"
    return "?"


class DeviceTaint(TorchDispatchMode):
    """Counts dispatched aten ops by name; marks the outputs of every op with a marked input
    (and the tensors it writes in place); records each host read of a marked tensor."""

    def __init__(self, seeds: list[torch.Tensor], sites: bool = False) -> None:
        super().__init__()
        self.sites = sites  # also count ops by the andrea_diag line that dispatched them (slow)
        self.op_sites: Counter[str] = Counter()
        # by id, checked for identity: a WeakSet would compare tensors with ==
        self.marked: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
        for t in seeds:
            self.mark(t)
        self.ops: Counter[str] = Counter()
        self.reads: list[tuple[str, str]] = []  # (op or method, site)

    def mark(self, t: torch.Tensor) -> None:
        self.marked[id(t)] = t

    def is_marked(self, t: torch.Tensor) -> bool:
        return self.marked.get(id(t)) is t

    def reset(self) -> None:
        self.ops.clear()
        self.op_sites.clear()
        self.reads.clear()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        marked = any(self.is_marked(a) for a in inputs)
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if self.sites:
            self.op_sites[_site()] += 1
        if marked and name in READ_OPS:
            self.reads.append((name, _site()))
        out = func(*args, **kwargs)
        if marked:
            for o in tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor):
                    self.mark(o)
            for arg, value in zip(func._schema.arguments, args, strict=False):
                if arg.alias_info is not None and arg.alias_info.is_write:  # in place, foreach_
                    for o in tree_flatten(value)[0]:
                        if isinstance(o, torch.Tensor):
                            self.mark(o)
        return out


@contextlib.contextmanager
def counting(mode: DeviceTaint) -> Iterator[DeviceTaint]:
    """``mode`` active, with the host reads that dispatch nothing on the CPU (``tolist``,
    ``numpy``, ``cpu``) of marked tensors recorded too."""
    real = {m: getattr(torch.Tensor, m) for m in READ_METHODS}

    def wrap(method: str) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if mode.is_marked(self):
                mode.reads.append((method, _site()))
            return real[method](self, *args, **kwargs)

        return read

    for m in READ_METHODS:
        setattr(torch.Tensor, m, wrap(m))
    try:
        with mode:
            yield mode
    finally:
        for m, f in real.items():
            setattr(torch.Tensor, m, f)


@contextlib.contextmanager
def marked_transfers(mode: DeviceTaint) -> Iterator[None]:
    """The trainer's copy of the batch to the device (``to_device`` in ``graphed.py``, the
    group runner's) gives a
    marked copy: on the CPU the batch would otherwise stay the host tensor itself, and its
    reads look free. (Only the batch's: ``rows.to_device`` of a host value onto the CPU is a
    no-op on any machine.)"""
    from andrea_diag.train import graphed as loop  # the module whose to_device the group calls

    real = loop.to_device

    def to_device(tokens: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = real(tokens, device).clone()
        mode.mark(out)
        return out

    loop.to_device = to_device  # type: ignore[assignment]
    try:
        yield
    finally:
        loop.to_device = real  # type: ignore[assignment]


def _summary(mode: DeviceTaint, updates: int) -> dict[str, Any]:
    """Per-update counts of one loop's run under ``mode``."""
    sites = Counter(f"{kind} at {site}" for kind, site in mode.reads)
    return {
        "aten_ops_per_update": sum(mode.ops.values()) / updates,
        "device_reads_per_update": len(mode.reads) / updates,
        "ops_per_update": {k: v / updates for k, v in mode.ops.most_common()},
        "read_sites": dict(sites.most_common()),
        "ops_by_site": {k: v / updates for k, v in mode.op_sites.most_common()},
    }


def count_ops(
    cfg: RunConfig,
    updates: int = 4,
    warmup: int = 2,
    *,
    sites: bool = False,
    cuda_paths: bool = False,
) -> dict[str, Any]:
    """Run ``warmup`` then ``updates`` updates of the engine (every default probe, metric rows
    flushed after the counted ones: between two flushes, as most updates of a run are) and of
    the plain loop, under :class:`DeviceTaint`; per loop: aten ops and device reads per counted
    update, ops by name, and where each read happened (``sites``: the ops too, by the line of
    ``andrea_diag`` that dispatched them; slow), and what the engine's metrics flush then costs
    (``flush``: its ops and reads for the rows waiting). ``cuda_paths``: the optimizer-state
    probe takes its CUDA arithmetic for Δθ·g (one flat product and one sum; the CPU's default is
    one dot a tensor, what tests/test_golden.py pins), so the engine's count is closer to what
    a GPU dispatches. ``cfg``: resolved."""
    from andrea_diag.bench.train import PlainLoop, _engine

    total = warmup + updates
    cfg = dataclasses.replace(cfg, steps=max(cfg.steps, total + updates + 1), eval_every=0,
                              checkpoint_every=0, inject=[],
                              flush_every=max(cfg.flush_every, total + updates + 1))  # fmt: skip
    device = torch.device(cfg.device if cfg.device != "auto" else "cpu")
    out: dict[str, Any] = {"size": cfg.size, "precision": cfg.precision, "updates": updates,
                           "warmup": warmup, "device": str(device)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="count-ops-") as tmp:
        engine, batch_tokens = _engine(cfg, Path(tmp) / "engine")
        for probe in engine.probes.probes:
            if cuda_paths and hasattr(probe, "flat_dot"):
                probe.flat_dot = True
        plain = PlainLoop(cfg, device)
        tokens = [batch_tokens(u) for u in range(1, total + updates + 1)]
        loops: dict[str, tuple[torch.nn.Module, Callable[[int], Any]]] = {
            "engine": (engine.model, engine.train_update),
            "plain": (plain.model, lambda u: plain.update(tokens[u - 1])),
        }
        for name, (model, step) in loops.items():
            mode = count_steps(model, step, warmup, updates, sites=sites)
            out[name] = _summary(mode, updates)
            out[name]["aten_ops_all_per_update"] = profile_steps(step, total + 1, updates)
            if name == "engine":
                mode.reset()
                with counting(mode):
                    engine.recorder.flush()
                out["flush"] = {"rows": total + updates, "aten_ops": sum(mode.ops.values()),
                                "device_reads": len(mode.reads)}  # fmt: skip
        engine.recorder.close()
        engine.recorder.release()
    return out


def count_steps(
    model: torch.nn.Module,
    step: Callable[[int], Any],
    warmup: int,
    updates: int,
    *,
    sites: bool = False,
) -> DeviceTaint:
    """``step(u)`` for u = 1 .. warmup (marking what the updates make) and then ``updates``
    more, counted; ``model``'s parameters and buffers are the device's first tensors."""
    mode = DeviceTaint([*model.parameters(), *model.buffers()], sites=sites)
    with counting(mode), marked_transfers(mode):
        for u in range(1, warmup + 1):
            step(u)
        mode.reset()
        for u in range(warmup + 1, warmup + updates + 1):
            step(u)
    return mode


def profile_steps(step: Callable[[int], Any], first: int, updates: int) -> float:
    """Every aten op per update as ``torch.profiler`` counts them (nested ones included: a
    ``linear`` and its ``addmm``, a ``stack`` and its ``unsqueeze``), the measure
    ``bench/profile_engine.py`` gives on a GPU, for ``step(first) .. step(first+updates-1)``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for u in range(first, first + updates):
            step(u)
    n = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    return n / updates


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--clip", default="global")
    p.add_argument("--updates", type=int, default=4)
    p.add_argument(
        "--micro-batch",
        type=int,
        help="m (default: the preset's); the op count "
        "hardly depends on it, the CPU time does (12m on the CPU: --micro-batch 1)",
    )
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the preset's)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=15, help="ops by name to print per loop")
    p.add_argument("--sites", action="store_true", help="ops by andrea_diag line too (slow)")
    p.add_argument("--cuda-paths", action="store_true",
                   help="the optimizer-state probe's CUDA arithmetic for Δθ·g (a flat dot)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the whole result here")
    a = p.parse_args(argv)
    shape = {k: v for k, v in (("micro_batch", a.micro_batch), ("seq_len", a.seq_len)) if v}
    cfg = RunConfig(size=a.size, precision=a.precision, clip=a.clip, device="cpu",
                    **shape).resolve()  # fmt: skip
    result = count_ops(cfg, a.updates, a.warmup, sites=a.sites, cuda_paths=a.cuda_paths)
    for name in ("engine", "plain"):
        r = result[name]
        print(f"{name}: {r['aten_ops_per_update']:.1f} aten ops dispatched/update "
              f"({r['aten_ops_all_per_update']:.1f} with nested ones, profiler), "
              f"{r['device_reads_per_update']:.2f} device reads/update")  # fmt: skip
        for op, n in list(r["ops_per_update"].items())[: a.top]:
            print(f"    {op:<28} {n:8.1f}")
        for site, n in list(r["ops_by_site"].items())[: a.top]:
            print(f"    {n:8.1f} ops at {site}")
        for site, n in r["read_sites"].items():
            print(f"    read {n / a.updates:.2f}/update: {site}")
    f = result["flush"]
    print(f"engine flush of {f['rows']} rows: {f['aten_ops']} aten ops, {f['device_reads']} reads")
    if a.json:
        atomic_write_text(a.json, json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
