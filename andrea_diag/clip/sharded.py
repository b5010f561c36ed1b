"""Global-norm clipping over FSDP2 shards: one all-reduce, the same answer as the unsharded model.

    from torch.distributed.fsdp import fully_shard
    from andrea_diag.clip.sharded import clip_grad_norm_sharded_
    fully_shard(model)
    loss.backward()
    total = clip_grad_norm_sharded_(model.parameters(), max_norm=1.0)   # every rank calls it

Under FSDP2 (``fully_shard``) every gradient is a ``DTensor`` whose local tensor is this rank's
shard. Each rank reduces its own shards to one partial (the sum of ``|g|^p``, or the max of
``|g|`` for p = inf) with stage 1 of the three-stage clipper, one all-reduce (SUM, or MAX for
p = inf) makes the global value, every rank takes the p-th root and the scale
``min(1, max_norm / (total + EPS))`` itself, and scales its own shards in place (stage 3).
Since the shards of a tensor are disjoint and cover it, the result is the unsharded norm (up to
the order of the floating-point additions).

Placements (only 1-D device meshes; every DTensor gradient must live on the same mesh):

- ``Shard(d)``: summed across ranks by the all-reduce: the case FSDP2 produces;
- ``Replicate()``: every rank holds the same whole tensor, so its contribution is added on each
  rank *after* the all-reduce (counted once, not world-size times; no second collective);
- ``Partial``, ``_StridedShard``, a 2-D mesh (HSDP): ``ValueError``, as is a list that mixes
  DTensor and plain gradients (a plain tensor carries no promise that the ranks agree on it).

A list with no DTensor gradient is clipped by :func:`andrea_diag.clip.api.clip_grad_norm_with_stats`
(no collective). This is a collective call: every rank of the group must call it with the same
parameters (a rank that skipped it would leave the others waiting in the all-reduce).

``impl`` as in :mod:`andrea_diag.clip.api`: ``"cuda"`` runs the fused stage-1 kernel
(``cuda.norm_partial``) and stage-3 kernel (``cuda.scale_``) on the local shards; stage 2 is
not used, because it takes the root of a *local* sum and the root must come after the
all-reduce: its torch ops (a sum or max of the partials, the root, the clamp) run here instead.
``"reference"`` runs the pure-torch stages of :mod:`andrea_diag.clip.reference`. ``"torch"``
hands the whole call to ``torch.nn.utils.clip_grad_norm_`` (which handles DTensors itself) and
returns its norm as a plain tensor, for comparison. Nothing here reads a value on the host.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from andrea_diag.clip import api, reference


def sharded_supported(backend: str | None = None) -> tuple[bool, str]:
    """(supported, why): whether this torch has FSDP2's ``fully_shard`` and ``DTensor``.

    ``backend`` (e.g. ``"gloo"``, ``"nccl"``) also checks that torch was built with it.
    """
    version = torch.__version__
    if not torch.distributed.is_available():
        return False, f"torch {version} was built without torch.distributed"
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (FSDP2, torch >= 2.6)
    except ImportError as exc:
        return False, f"torch {version} has no torch.distributed.fsdp.fully_shard: {exc}"
    try:
        from torch.distributed.tensor import DTensor  # noqa: F401  (public since 2.5)
    except ImportError as exc:
        return False, f"torch {version} has no torch.distributed.tensor.DTensor: {exc}"
    if backend is not None:
        check = getattr(torch.distributed, f"is_{backend}_available", None)
        if check is None:
            return False, f"unknown process-group backend {backend!r}"
        if not check():
            return False, f"torch {version} was built without the {backend} backend"
    return True, f"torch {version}: fully_shard (FSDP2) and DTensor present"


def _dtensor_type() -> type | None:
    """torch's DTensor class, or None where torch.distributed is missing (no DTensor can exist)."""
    if not torch.distributed.is_available():
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return None
    return DTensor


def _split(grads: list[torch.Tensor], group: object | None) -> tuple[list, list, object]:
    """Local shards and local replicas of DTensor gradients, and the process group to reduce on.

    Raises ValueError for what this module does not handle (see the module docstring).
    """
    from torch.distributed.tensor import Replicate, Shard

    dtensor = _dtensor_type()
    plain = [g for g in grads if not isinstance(g, dtensor)]
    if plain:
        raise ValueError(
            f"clip_grad_norm_sharded_: {len(plain)} of {len(grads)} gradients are plain tensors "
            "mixed with DTensor gradients; nothing says whether the ranks agree on them, so "
            "their norm could be counted once or world-size times. Shard those modules too, "
            "make them Replicate DTensors, or clip them separately."
        )
    mesh = grads[0].device_mesh
    shards, replicas = [], []
    for i, g in enumerate(grads):
        if g.device_mesh != mesh:
            raise ValueError(f"gradient {i} is on another device mesh ({g.device_mesh} != {mesh})")
        if mesh.ndim != 1:
            raise ValueError(
                f"gradient {i} is on a {mesh.ndim}-D mesh (placements {g.placements}); only 1-D "
                "meshes (plain FSDP2) are supported, not HSDP or FSDP+TP"
            )
        placement = g.placements[0]
        # Under no_grad, to_local() is the DTensor's own local tensor: scaling it in place
        # scales the gradient (with grad enabled it would be an autograd view).
        if isinstance(placement, Shard):
            shards.append(g.to_local())
        elif isinstance(placement, Replicate):
            replicas.append(g.to_local())
        else:
            raise ValueError(
                f"gradient {i} has placement {placement}; only Shard and Replicate are supported "
                "(a Partial gradient still awaits its reduction)"
            )
    if group is None:
        group = mesh.get_group()
    elif torch.distributed.get_world_size(group) != mesh.size():
        raise ValueError(
            f"group has {torch.distributed.get_world_size(group)} ranks but the gradients' "
            f"mesh has {mesh.size()}"
        )
    return shards, replicas, group


def _local_partial(
    grads: list[torch.Tensor],
    p: float,
    acc: torch.dtype,
    which: str,
    device: torch.device,
) -> torch.Tensor:
    """0-dim ``sum |g|^p`` (``max |g|`` for p = inf) over this rank's tensors, in ``acc``."""
    grads = [g for g in grads if g.numel()]  # a rank may hold an empty shard (dim 0 < ranks)
    if not grads:
        return torch.zeros((), dtype=acc, device=device)
    if which == "cuda" and acc == torch.float32:
        from andrea_diag.clip import cuda as cuda_ext

        # The fused stage-1 kernel where it takes the list (fp32/bf16/fp16, contiguous);
        # its float32 partials are in reference.grad_norm_partial's order.
        partials = (
            cuda_ext.norm_partial(grads, p)
            if cuda_ext.supports(grads, p)
            else reference.grad_norm_partial(grads, p, acc)
        )
    else:
        partials = reference.grad_norm_partial(grads, p, acc)
    return partials.amax() if math.isinf(p) else partials.sum()


def _all_reduce(local: torch.Tensor, p: float, group: object) -> torch.Tensor:
    """The global sum (max for p = inf) of ``local`` over ``group``: one collective."""
    dist = torch.distributed
    if not math.isinf(p):
        # |g|^p >= 0, so the sum has no inf - inf: NaN and inf propagate through it.
        buf = local.clone()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        return buf
    # A max reduction need not propagate NaN (gloo's is std::max, order dependent), so a NaN
    # flag rides along in the same MAX all-reduce and restores it afterwards.
    buf = torch.stack([torch.nan_to_num(local, nan=0.0), local.isnan().to(local.dtype)])
    dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
    return torch.where(buf[1] > 0, torch.full_like(buf[0], math.nan), buf[0])


def _torch_sharded(params: list, max_norm: float, norm_type: float) -> torch.Tensor:
    """torch's own clip_grad_norm_ (DTensor-aware); its DTensor norm made a plain tensor."""
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    dtensor = _dtensor_type()
    if dtensor is not None and isinstance(total, dtensor):
        total = total.full_tensor()  # reduces torch's Partial norm: a collective, no host read
    return total


def clip_grad_norm_sharded_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    *,
    group: object | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Clip FSDP2-sharded gradients in place by their global norm; return the pre-clip norm.

    Every rank returns the same 0-dim tensor (on the gradients' device, float32, float64 for
    float64 gradients): the norm of the whole unsharded gradient set. ``group`` defaults to the
    gradients' 1-D device mesh's process group; a group given must have the mesh's size.
    Without DTensor gradients this is :func:`andrea_diag.clip.api.clip_grad_norm_with_stats`'s
    total norm (the drop-in would return the gradients' dtype instead).
    """
    # the drop-in's rules: float(norm_type) first read True as the L1 norm, and 10**400 was a
    # bare OverflowError
    max_norm, norm_type = api.check_max_norm(max_norm), reference.check_norm_type(norm_type)
    if impl not in api.IMPLS:
        raise ValueError(f"impl must be one of {api.IMPLS}, got {impl!r}")
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    dtensor = _dtensor_type()
    if dtensor is None or not any(isinstance(g, dtensor) for g in grads):
        # the stats variant: float32 (float64) like the sharded path, not the drop-in's dtype
        return api.clip_grad_norm_with_stats(params, max_norm, norm_type, impl=impl).total_norm
    if impl == "torch":
        return _torch_sharded(params, max_norm, norm_type)
    with torch.no_grad():
        shards, replicas, group = _split(grads, group)
        local = shards + replicas
        which = api.resolve_impl(impl, local)
        acc = reference.acc_dtype(local)  # the same on every rank: dtypes are per parameter
        device = local[0].device
        partial = _local_partial(shards, norm_type, acc, which, device)
        total = _all_reduce(partial, norm_type, group)
        if replicas:  # whole on every rank: added after the reduction, so counted once
            rep = _local_partial(replicas, norm_type, acc, which, device)
            total = torch.maximum(total, rep) if math.isinf(norm_type) else total + rep
        if not math.isinf(norm_type):
            total = total.pow(1.0 / norm_type)
        scale = torch.clamp(max_norm / (total + reference.EPS), max=1.0)
        # Stage 3 on the local tensors: the fused kernel on CUDA, grad_scale_ otherwise.
        api._scale_stage(which, [g for g in local if g.numel()], scale, norm_type)
    return total
