"""``ClippedAdamW``: global-norm gradient clipping folded into the AdamW step.

    from andrea_diag.clip.fused_adamw import ClippedAdamW
    opt = ClippedAdamW(model.parameters(), lr=3e-4, weight_decay=0.1, max_norm=1.0)
    loss.backward(); opt.step(); opt.zero_grad()
    opt.last_clip.total_norm      # pre-clip norm, per-tensor norms, scale, non-finite flag

Equivalent, to rounding, to ``torch.nn.utils.clip_grad_norm_(params, max_norm)`` followed by
``torch.optim.AdamW(params, ...).step()``, except that a non-finite global norm skips the whole
update (parameters, moments and step counters stay as they were) instead of writing NaN into
the weights. On CUDA it runs three stages and never syncs with the host:

1. ``k_clip_norm`` (csrc/clip.cu; its last block reduces): the global norm, the
   per-tensor norms, ``scale = min(1, max_norm / (norm + 1e-6))`` and the non-finite flag, all
   left in device memory (the existing clipper with ``apply=False``);
2. ``k_step_inc`` (csrc/dev/adamw.cu): every ``state["step"]`` += 1 unless the flag is set;
3. ``k_adamw_clipped`` (csrc/dev/adamw.cu, an experiment built as its own extension by
   ``cuda.load_dev`` on first use): the AdamW update with ``g * scale`` inside it. The gradient is read
   once and never written, so an active clip costs only the norm pass on top of AdamW (the
   separate scale pass would read and write every gradient once more).

Anywhere else (CPU, float64 or half parameters, non-contiguous tensors, no compiler) it runs
:func:`~andrea_diag.clip.adamw_reference.adamw_clipped_reference`, the same math in pure torch
(also sync-free): torch's AdamW op for op, so on the CPU the step after the clip gives the bits
of torch's default CPU AdamW (its single-tensor step; ``foreach=True`` gives the same bits in
float32/float64), tensor betas and a tensor weight decay included (torch rounds their terms in
their dtype, and so does this). torch's ``fused=True`` CPU kernel rounds elsewhere: a few ulps
from its own default in float32/float64, more with tensor betas (``adamw_reference.py`` says
where and by how much, and where else it cannot).

State keys match ``torch.optim.AdamW`` (``step`` as a 0-dim float32 tensor on the parameter's
device, as torch's fused/capturable AdamW keeps it; ``exp_avg``; ``exp_avg_sq``), so code that
reads ``optimizer.state`` (andrea_diag.probes.optstate) works unchanged, torch AdamW state dicts
load, and ours load into torch's AdamW (groups carry its keys). torch AdamW's keywords are taken:
``foreach``, ``fused``, ``capturable`` are ignored (this step is fused and sync-free), so what
torch's own implementations refuse runs here (``capturable=True`` with CPU parameters, torch's
AssertionError at its step; tensor betas with ``foreach=True``, its ValueError); the pairs torch
refuses on any device (``fused`` with ``foreach`` or ``differentiable``) raise its
RuntimeError. amsgrad, maximize, differentiable, Adam's coupled decay
(``decoupled_weight_decay=False``), complex parameters, a tensor ``lr`` and sparse gradients
are refused, in a group, a loaded state dict or a group's flag set later (at the next
``step()``, where torch's AdamW would honour it); a sparse gradient in a later group is
refused before any group steps (torch's steps the groups before it, then raises), and
parameters on several devices are refused (one global norm, one device).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from andrea_diag.clip import reference
from andrea_diag.clip.adamw_args import check_adamw_hyper, scalar_betas
from andrea_diag.clip.adamw_reference import adamw_clipped_reference
from andrea_diag.clip.adamw_state import AdamWPickling
from andrea_diag.clip.api import ClipResult
from andrea_diag.clip.max_norm import check_max_norm

IMPLS = ("auto", "cuda", "reference")


def _kernel_fits(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
) -> bool:
    from andrea_diag.clip import cuda as cuda_ext

    return all(
        p.dtype == torch.float32
        and g.dtype in cuda_ext.SUPPORTED_DTYPES
        and p.is_contiguous()
        and g.is_contiguous()
        and m.is_contiguous()
        and v.is_contiguous()
        and g.shape == p.shape
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs, strict=True)
    )


def _resolve(impl: str, grads: Sequence[torch.Tensor], fits: Callable[[], bool], p: float) -> str:
    """The path that will run: "cuda" (kernels) or "reference"."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    on_cuda = grads[0].is_cuda
    if impl == "reference" or (impl == "auto" and not on_cuda):
        return "reference"
    if not on_cuda:
        raise ValueError("impl='cuda' needs parameters on a CUDA device")
    from andrea_diag.clip import cuda as cuda_ext

    ok, why = cuda_ext.available()
    if ok and fits() and cuda_ext.supports(list(grads), p):
        return "cuda"
    if impl == "cuda":
        raise RuntimeError(f"impl='cuda' but the fused kernels cannot take this step ({why})")
    return "reference"


def _clip_stats(
    which: str, grads: list[torch.Tensor], max_norm: float, norm_type: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Norm stages only (no scale pass): (total, per_tensor, scale, nonfinite) on the device."""
    if which == "cuda":
        from andrea_diag.clip import cuda as cuda_ext

        # partial + final only (apply=False): the scale is consumed inside the update.
        return cuda_ext.load().clip(grads, float(max_norm), float(norm_type), False)
    acc = reference.acc_dtype(grads)
    return reference.clip_reference(grads, max_norm, norm_type, acc_dtype=acc, apply=False)


def _update(which: str, args: tuple, scale: torch.Tensor, nonfinite: torch.Tensor, **hyper: Any):
    if which == "cuda":
        from andrea_diag.clip import cuda as cuda_ext

        hyper = {k: float(v) for k, v in hyper.items()}  # the kernels take floats (CPU betas)
        cuda_ext.load_dev().adamw_clipped(*args, scale.float(), nonfinite, **hyper)
    else:
        adamw_clipped_reference(*args, scale, nonfinite, **hyper)


def clip_adamw_(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    steps: Sequence[torch.Tensor],
    *,
    max_norm: float,
    norm_type: float = 2.0,
    lr: float = 1e-3,
    beta1: float | torch.Tensor = 0.9,
    beta2: float | torch.Tensor = 0.999,
    eps: float = 1e-8,
    weight_decay: float | torch.Tensor = 1e-2,
    impl: str = "auto",
) -> ClipResult:
    """Functional form of one ClippedAdamW step over one list (grads passed explicitly).

    For gradients that do not live in ``p.grad``, e.g. a bf16 gradient buffer for fp32 master
    weights (torch refuses ``p.grad`` of another dtype). ``steps`` are 0-dim float32 tensors on
    the parameters' device, incremented in place unless the norm is non-finite.
    """
    norm_type = reference.check_norm_type(norm_type)  # p <= 0: no sum of |g|^p to split
    grads = list(grads)
    args = (list(params), grads, list(exp_avgs), list(exp_avg_sqs), list(steps))
    which = _resolve(impl, grads, lambda: _kernel_fits(*args[:4]), norm_type)
    total, per, scale, nonfinite = _clip_stats(which, grads, max_norm, norm_type)
    _update(
        which, args, scale, nonfinite,
        lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
    )  # fmt: skip
    return ClipResult(total, per, scale, nonfinite, which, norm_type=norm_type)


_REFUSED_FLAGS = {
    "amsgrad": "amsgrad=True (the step keeps no max_exp_avg_sq)",
    "maximize": "maximize=True (the step descends; negate the loss instead)",
    "differentiable": "differentiable=True (the step runs under no_grad)",
}


def _check_flags(group: dict[str, Any]) -> None:
    """ValueError naming each torch AdamW flag in ``group`` that this step would ignore."""
    asked = [why for flag, why in _REFUSED_FLAGS.items() if group.get(flag)]
    if group.get("decoupled_weight_decay") is False and group.get("weight_decay"):
        asked.append("decoupled_weight_decay=False (Adam's L2 decay; this step decays as AdamW)")
    if isinstance(group.get("lr"), torch.Tensor):  # float() of it would sync every step
        asked.append("a tensor lr (a float lr needs no host read)")
    betas = group.get("betas")
    if isinstance(betas, (tuple, list)) and any(
        isinstance(b, torch.Tensor) and b.device.type != "cpu" for b in betas
    ):
        asked.append("betas on a device (float() of them every step is a host sync)")
    if asked:
        raise ValueError(f"ClippedAdamW does not support {', '.join(asked)}; use torch.optim.AdamW")


def _check_impl_flags(*, foreach: bool | None, fused: bool | None, differentiable: bool) -> None:
    """torch's AdamW's own ``RuntimeError`` for the flag pairs it refuses whatever the device;
    this step ignores ``foreach`` and ``fused``, but the call is a slip either way (checked
    before our refusal of ``differentiable``, so the pair gets torch's error)."""
    if fused and differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if fused and foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def _check_group(group: dict[str, Any]) -> None:
    _check_flags(group)
    if any(p.is_complex() for p in group["params"]):
        raise TypeError(
            "ClippedAdamW does not support complex parameters (torch's AdamW steps them as real "
            "pairs; this step would drop the imaginary part); use torch.optim.AdamW"
        )


def _capturable_devices() -> tuple[str, ...]:
    """Device types torch's AdamW accepts with ``capturable=True`` (not the CPU)."""
    try:
        from torch.optim.optimizer import _get_capturable_supported_devices
    except ImportError:  # a private helper: fall back to the one device that always qualifies
        return ("cuda",)
    return tuple(_get_capturable_supported_devices())


class ClippedAdamW(AdamWPickling, torch.optim.Optimizer):  # pickling: adamw_state.py
    """AdamW whose step first clips the global gradient norm, on the device, without a sync.

    Hyper-parameters and defaults are torch.optim.AdamW's, plus ``max_norm`` and ``norm_type``
    (global over every parameter of the optimizer, like ``clip_grad_norm_(model.parameters())``).
    ``max_norm=math.inf`` measures the norm and never clips; ``0`` is refused (torch's
    ``clip_grad_norm_(..., 0)`` zeroes every gradient, and AdamW then only decays). ``impl``:
    ``"auto"`` (the CUDA kernels where they apply, else the reference), ``"cuda"`` (raise if
    unavailable) or ``"reference"``. After each ``step()``, :attr:`last_clip` holds the
    :class:`ClipResult` of that step (device tensors; reading them is the caller's sync).
    ``norm_type`` <= 0 is refused, as the stats variant refuses it (no sum to split). The
    norm is the drop-in's (float32 accumulation): beside clip + torch's AdamW it differs where
    the drop-in's docstring says: an fp16 gradient norm past 65504 clips finitely here, where
    torch's inf norm zeroes the gradients (and torch's fp16 AdamW step then makes 0 / 0 NaN).

    With the probes (``SpikeMonitor``): the clip happens inside ``step()``, so ``.grad`` stays
    unclipped and ``after_clip`` runs before the scale exists; the optimizer-state probe scales
    the gradient it captured by ``last_clip``'s scale after the step, so the pollution shares
    are those of the clipped gradient AdamW received (as with ``clip_grad_norm_`` + an AdamW).
    """

    # the optimizer-state probe scales its pre-step gradient by last_clip (clipped_in_step)
    clips_in_step = True

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        max_norm: float = 1.0,
        norm_type: float = 2.0,
        impl: str = "auto",
    ) -> None:
        if isinstance(lr, torch.Tensor):
            raise ValueError("ClippedAdamW takes a float lr (a tensor lr would need a host read)")
        _check_flags({"betas": betas})  # on a device: before the range check reads them
        check_adamw_hyper(lr, betas, eps, weight_decay)  # torch's words ("Invalid learning rate")
        _check_impl_flags(foreach=foreach, fused=fused, differentiable=differentiable)
        del foreach, capturable, fused  # how torch runs its step; this one is fused and sync-free
        betas = scalar_betas(betas)  # a tuple of floats or 0-dim tensors, as torch's group holds
        max_norm = check_max_norm(max_norm, allow_zero=False)  # one rule with the drop-in's
        reference.check_norm_type(norm_type)
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        # capturable=True: torch's Optimizer.load_state_dict then keeps "step" as a float32
        # tensor on the parameter's device (where the kernels read it) instead of on the CPU.
        # decoupled_weight_decay: the flag torch's own optimizers use to say "AdamW-style"
        # (the optimizer-state probe reads it to know the decay does not enter m and v).
        # amsgrad, maximize, differentiable: the flags torch's AdamW keeps in every group, so
        # state dicts carry the same keys; any of them True is refused (add_param_group).
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            capturable=True,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=None,
            differentiable=differentiable,
            fused=None,
            decoupled_weight_decay=True,
        )
        super().__init__(params, defaults)
        self.max_norm, self.norm_type, self.impl = float(max_norm), float(norm_type), impl
        self.last_clip: ClipResult | None = None
        self.last_impl: str | None = None

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's, then the refusals: a group that asks for what this step does not do
        (amsgrad, maximize, differentiable) or holds a complex parameter raises here, where
        torch's AdamW would honour it and this step would silently not."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _check_group(group)
        except (ValueError, TypeError):
            self.param_groups.pop()
            raise

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's; a state dict from a torch AdamW with amsgrad, maximize or differentiable
        set, or a tensor lr, is refused before anything is loaded."""
        groups = [{**g, "capturable": True} for g in state_dict["param_groups"]]  # see __init__
        for group in groups:
            _check_flags(group)
        super().load_state_dict({**state_dict, "param_groups": groups})

    def state_dict(self) -> dict[str, Any]:
        """torch's, with each group's ``capturable`` set as torch's AdamW can run it: True only
        where every parameter is on a device torch's capturable AdamW takes (CUDA), so the state
        dict of a CPU run loads into ``torch.optim.AdamW`` and steps there. (This optimizer
        loads any dict with ``capturable=True``: its ``step`` becomes a device tensor.)"""
        out = super().state_dict()
        for saved, group in zip(out["param_groups"], self.param_groups, strict=True):
            saved["capturable"] = all(
                p.device.type in _capturable_devices() for p in group["params"]
            )
        return out

    def _gather(self) -> list[tuple[dict[str, Any], list[torch.Tensor], list[torch.Tensor]]]:
        """Per group: (group, params with a grad, their grads); lazily creates the state."""
        out = []
        for group in self.param_groups:
            ps, gs = [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("ClippedAdamW does not support sparse gradients")
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                elif st["step"].device != p.device or st["step"].dtype != torch.float32:
                    # e.g. a state dict from a non-capturable torch AdamW (CPU step): one copy
                    st["step"] = st["step"].to(device=p.device, dtype=torch.float32)
                ps.append(p)
                gs.append(p.grad)
            out.append((group, ps, gs))
        return out

    def _fits(self, groups: list[tuple[dict, list, list]]) -> bool:
        return all(
            _kernel_fits(
                ps,
                gs,
                [self.state[p]["exp_avg"] for p in ps],
                [self.state[p]["exp_avg_sq"] for p in ps],
            )
            for _, ps, gs in groups
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Clip (global norm over every parameter with a grad), then one AdamW step.

        A group whose flags were changed after it was added (``group["maximize"] = True``, as
        torch's AdamW honours at its next step) is refused here, before the closure runs and
        before anything changes; this step would have ignored the flag."""
        for group in self.param_groups:  # a few dict reads a group: no tensor work
            _check_flags(group)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self._gather()
        grads = [g for _, _, gs in groups for g in gs]
        if not grads:
            return loss
        if len({g.device for g in grads}) != 1:
            raise RuntimeError("ClippedAdamW needs every parameter on one device")
        which = _resolve(self.impl, grads, lambda: self._fits(groups), self.norm_type)
        total, per, scale, nonfinite = _clip_stats(which, grads, self.max_norm, self.norm_type)
        for group, ps, gs in groups:
            if not ps:
                continue
            beta1, beta2 = group["betas"]
            st = [self.state[p] for p in ps]
            args = (
                ps,
                gs,
                [s["exp_avg"] for s in st],
                [s["exp_avg_sq"] for s in st],
                [s["step"] for s in st],
            )
            _update(
                which,
                args,
                scale,
                nonfinite,
                lr=float(group["lr"]),
                beta1=beta1,  # a tensor beta: torch computes its bias corrections in its dtype
                beta2=beta2,
                eps=float(group["eps"]),
                weight_decay=group["weight_decay"],  # a tensor one rounds in its dtype too
            )
        self.last_clip = ClipResult(total, per, scale, nonfinite, which, norm_type=self.norm_type)
        self.last_impl = which
        return loss
