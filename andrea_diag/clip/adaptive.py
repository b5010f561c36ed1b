"""Adaptive clip modes: ZClip, AGC, SPAM and skip-update, with no host sync.

    from andrea_diag.clip.modes import make_clipper
    clipper = make_clipper("zclip")                  # or "agc", "spam", "skip"
    clipper = make_clipper("spam", optimizer=opt)    # SPAM reads Adam's v: bind the optimizer
    res = clipper(model.parameters())                # after backward (and unscale), before step
    step_unless(opt, res.skip)                       # skip-update: the step is gated on device

What each does to the gradient ``g`` (norms are L2; ``n`` = the total pre-clip norm):

- ``zclip`` (Kumar et al. 2025): an EMA of ``n``'s mean ``μ`` and variance ``σ²`` (α 0.97),
  initialised from the first 25 norms (no clipping during that warm-up). With
  ``z = (n - μ) / (σ + 1e-6)``, an update with ``z > z_t`` (2.5) is scaled to the norm
  ``μ + z_t²·σ / z`` ("adaptive scaling"); the EMA then takes the clipped norm, not ``n``.
  Two differences from the ZClip reference: there is no absolute cap (the reference's optional
  ``max_grad_norm``): after the warm-up only the z-score rule acts, however large the norm;
  and an update with no gradients at all is skipped (nothing recorded, the EMA and the warm-up
  count do not move) rather than counted as a norm of 0.
- ``agc`` (Brock et al. 2021): per unit (a row of a weight matrix: its output unit; a whole
  vector for biases and gains), ``g_i ← g_i · λ·max(‖w_i‖, ε) / ‖g_i‖`` where
  ``‖g_i‖ > λ·max(‖w_i‖, ε)`` (λ 0.01, ε 1e-3). Every parameter is clipped, the head too (the
  paper exempts its classifier layer; here the arms differ only in the rule).
- ``spam`` (Huang et al. 2025): each element with ``g² > θ·v`` (θ 5000, ``v`` Adam's
  ``exp_avg_sq`` before this step) becomes ``sign(g)·sqrt(θ·v)``; every 500 updates Adam's
  ``m``, ``v`` and step count are reset to zero, and for the 20 updates after a reset (and at the
  start) nothing is clipped, since ``v`` is near zero then (the first clip is at update 21;
  the reference's gate ``t >= 20`` clips at its update 20). The paper's cosine warm-up of the
  step size after a reset is not reproduced: every arm keeps the run's one LR schedule. So the
  step count is reset too, where the reference keeps counting and lets its warm-up temper the
  first steps: bias correction then treats the next step as a first step. As in
  the paper's rule and code, an element whose ``v`` is still exactly 0 when clipping is on (an
  embedding row of a token not seen since the last reset) has its gradient set to 0, so it stays
  untrained until the next reset's warm-up: on text with a long tail of tokens SPAM clips
  something at nearly every update. A parameter whose first gradient arrives after the warm-up
  has no optimizer state yet; it counts as ``v = 0`` too (its first gradient is zeroed), as in
  the reference, which creates the state before it clips.
- ``skip`` (OLMo-core style): the optimizer step is skipped when ``n`` exceeds the mean of the
  last 128 norms by more than 6 standard deviations (no decision before 64 norms are in the
  window); the gradient itself is never changed. A non-finite norm is always skipped.
  Departures from OLMo-core's ``SkipStepOptimizer``: it also tests the loss (a clipper sees only
  the gradient); its test is two-sided (``|z|``: a norm 6σ *below* the mean skips too); it
  decides once it holds ``max(20, window // 2)`` norms counting the current one (one update
  earlier at 128, never for a window under 19); and a non-finite norm stays in its window, so
  one NaN there skips every step until it leaves, where here it is a gap in the statistics.

**No host sync.** Statistics, thresholds and decisions are device tensors: counters that only
count calls stay on the host (they do not depend on data), everything that depends on a norm
stays on the device. On CUDA the pre-clip norms come from the fused norm pass
(``clip_grad_norm_with_stats(mode="none")``: the per-tensor norms it already produces), and a
global scale is applied by the fused scale kernel. ``step_unless`` gates a fused Adam/AdamW step
through its ``found_inf`` input (the mechanism GradScaler uses), so a skip needs no sync either.

**Composition.** With GradScaler, unscale first (``scaler.unscale_(opt)``), then clip: every mode
reads true gradient magnitudes. GradScaler's ``step`` reads its own overflow flag on the host
anyway, so with fp16 gate it as ``if not bool(res.skip): scaler.step(opt)``. With gradient
accumulation, call the clipper once per optimizer update, after the last microbatch's backward:
each mode then acts on the accumulated gradient, and its statistics advance once per update.

Each mode's formula is also written out as a pure function below (``zclip_scale``,
``zclip_ema``, ``agc_scale``, ``spam_clip_``, ``skip_decision``): the references the tests check
against hand-computed values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from andrea_diag.clip.api import ClipResult, _notice_once, _scale_stage, clip_grad_norm_with_stats
from andrea_diag.clip.registry import Clipper, register

TINY = 1e-6  # the denominators' floor, as in the papers' code


# -- the formulas -------------------------------------------------------------------------------
def zclip_scale(
    norm: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, z_thresh: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ZClip's decision: (scale for the gradients, the norm the EMA takes). 0-dim tensors."""
    std = var.clamp_min(0).sqrt()
    z = (norm - mean) / (std + TINY)
    spike = z > z_thresh  # NaN compares False: a non-finite norm is not clipped here
    target = mean + z_thresh**2 * std / torch.where(spike, z, torch.ones_like(z))
    scale = torch.where(spike, (target / (norm + TINY)).clamp(max=1.0), torch.ones_like(norm))
    return scale, torch.where(spike, target, norm)


def zclip_ema(
    mean: torch.Tensor, var: torch.Tensor, value: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One EMA step of (μ, σ²) towards ``value``; a non-finite value leaves them unchanged."""
    new_mean = alpha * mean + (1 - alpha) * value
    new_var = alpha * var + (1 - alpha) * (value - new_mean) ** 2
    ok = torch.isfinite(value)
    fresh = torch.isnan(mean)  # a warm-up of non-finite norms only: start from this value
    new_mean = torch.where(fresh, value, new_mean)
    new_var = torch.where(fresh, torch.zeros_like(var), new_var)
    return torch.where(ok, new_mean, mean), torch.where(ok, new_var, var)


def unit_norms(t: torch.Tensor) -> torch.Tensor:
    """AGC's unit-wise norm: over every dim but the first (keepdim), or the whole of a vector."""
    t = t.float()
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True)


def agc_scale(w_norm: torch.Tensor, g_norm: torch.Tensor, lam: float, eps: float) -> torch.Tensor:
    """AGC's per-unit scale: ``λ·max(‖w‖, ε) / ‖g‖`` where ``‖g‖`` exceeds that bound, else 1."""
    bound = w_norm.clamp_min(eps) * lam
    return torch.where(g_norm > bound, bound / g_norm.clamp_min(TINY), torch.ones_like(g_norm))


def spam_clip_(grad: torch.Tensor, v: torch.Tensor, theta: float) -> torch.Tensor:
    """SPAM's spike-aware clip, in place: ``g ← sign(g)·sqrt(θ·v)`` where ``g² > θ·v``.
    Returns a 0-dim device bool: whether any element was clipped."""
    bound = (v.float() * theta).sqrt().to(grad.dtype)
    clipped = (grad.abs() > bound).any()  # |g| > bound <=> g² > θ·v
    torch.clamp(grad, min=-bound, max=bound, out=grad)
    return clipped


def _v_of(state: dict[Any, dict[str, Any]], w: torch.Tensor) -> torch.Tensor:
    """Adam's ``v`` for ``w``; zeros for a parameter the optimizer has no state for yet (its
    first gradient arrives after the warm-up). The SPAM reference creates ``v = 0`` before it
    clips, so every nonzero element of that first gradient is clipped to 0, as for any element
    whose ``v`` is still 0 (module docstring)."""
    st = state.get(w)
    if st is not None and "exp_avg_sq" in st:
        return st["exp_avg_sq"]
    return torch.zeros_like(w.grad)


def skip_decision(norm: torch.Tensor, window: torch.Tensor, z: float) -> torch.Tensor:
    """0-dim bool: ``norm`` exceeds the mean of the window's finite values by ``z`` (sample)
    standard deviations, or is not finite (a NaN compares False: it must skip explicitly).
    Unfilled slots hold NaN and are ignored."""
    finite = torch.isfinite(window)
    k = finite.sum()
    vals = torch.where(finite, window, torch.zeros_like(window))
    mean = vals.sum() / k.clamp_min(1)
    dev = torch.where(finite, window - mean, torch.zeros_like(window))
    std = ((dev * dev).sum() / (k - 1).clamp_min(1)).sqrt()
    return ((k >= 2) & ((norm - mean) > z * std)) | ~torch.isfinite(norm)


def step_unless(
    optimizer: torch.optim.Optimizer, skip: torch.Tensor | None, *args: Any, **kwargs: Any
) -> None:
    """``optimizer.step()``, unless the 0-dim bool ``skip`` is true.

    A fused Adam/AdamW takes the decision on the device (its ``found_inf`` input: parameters,
    moments and step count stay as they were); any other optimizer needs the flag on the host,
    once per call (a one-time notice says so).
    """
    if skip is None:
        optimizer.step(*args, **kwargs)
        return
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = skip.to(torch.float32)  # type: ignore[attr-defined]
        try:
            optimizer.step(*args, **kwargs)
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
        return
    _notice_once(
        "skip-sync",
        f"andrea-diag: step_unless reads the skip flag on the host: {type(optimizer).__name__} "
        "is not fused (pass fused=True to Adam/AdamW to keep the decision on the device)",
    )
    if not bool(skip):
        optimizer.step(*args, **kwargs)


# -- the modes ----------------------------------------------------------------------------------
class _Adaptive(Clipper):
    """The adaptive modes' common first step: the pre-clip norms from one measuring pass (the
    fused norm pass on CUDA, no gradient changed), then the mode's own rule in ``_apply``."""

    def __call__(self, params: Sequence[torch.Tensor]) -> ClipResult:
        params = [p for p in params if p.grad is not None]
        res = clip_grad_norm_with_stats(params, 1.0, mode="none", impl=self.impl)
        return self._apply(params, res) if params else res  # no gradient: nothing to decide

    def _apply(self, params: list[torch.Tensor], res: ClipResult) -> ClipResult:
        raise NotImplementedError


def _per_tensor_scale(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """Per-tensor post/pre, so ``ClipResult.per_tensor_norm * scale`` is each tensor's
    post-clip norm (what the probes read as the gradient Adam received)."""
    return torch.where(pre > 0, post / pre.clamp_min(1e-30), torch.ones_like(pre))


def _to(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.to(like.device)


@register
class ZClip(_Adaptive):
    """ZClip: the norm's z-score against its EMA mean and variance (see the module docstring).

    Unlike the ZClip reference: no absolute cap (its ``max_grad_norm``) after the warm-up, only
    the z-score rule; and an update with no gradients is skipped, not counted as norm 0.
    """

    name, label, color = "zclip", "ZClip", "#9467bd"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = 0  # calls so far (the warm-up counts calls, a host number)
        self.warm: torch.Tensor | None = None  # the warm-up norms (NaN: not finite)
        self.mean: torch.Tensor | None = None  # None until the warm-up is complete
        self.var: torch.Tensor | None = None

    def _apply(self, params: list[torch.Tensor], res: ClipResult) -> ClipResult:
        norm = res.total_norm.float()
        p = self.params
        if self.mean is None or self.var is None:
            if self.warm is None:
                self.warm = torch.full((p.zclip_warmup,), math.nan, device=norm.device)
            self.warm = _to(self.warm, norm)
            self.warm[self.seen].copy_(torch.where(torch.isfinite(norm), norm, math.nan))
            self.seen += 1
            if self.seen == p.zclip_warmup:  # population statistics, as ZClip initialises
                self.mean = torch.nanmean(self.warm)
                self.var = torch.nanmean((self.warm - self.mean) ** 2)
            return res
        self.mean, self.var = _to(self.mean, norm), _to(self.var, norm)
        scale, value = zclip_scale(norm, self.mean, self.var, p.zclip_z)
        _scale_stage(res.impl, [t.grad for t in params], scale, 2.0)
        self.mean, self.var = zclip_ema(self.mean, self.var, value, p.zclip_alpha)
        self.seen += 1
        return ClipResult(res.total_norm, res.per_tensor_norm, scale, res.nonfinite, res.impl)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "warm": self.warm, "mean": self.mean, "var": self.var}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = int(state["seen"])
        self.warm, self.mean, self.var = state["warm"], state["mean"], state["var"]


@register
class AGC(_Adaptive):
    """Adaptive gradient clipping: unit-wise gradient-to-weight ratio (module docstring)."""

    name, label, color = "agc", "AGC", "#8c564b"

    def _apply(self, params: list[torch.Tensor], res: ClipResult) -> ClipResult:
        p = self.params
        post = []
        for i, w in enumerate(params):
            g = w.grad
            # a vector's gradient norm is the fused pass's per-tensor norm: no second read
            g_norm = res.per_tensor_norm[i].float() if g.dim() <= 1 else unit_norms(g)
            s = agc_scale(unit_norms(w.detach()), g_norm, p.agc_lambda, p.agc_eps)
            if g.dtype in (torch.float16, torch.bfloat16):
                g.copy_(g.float() * s)  # scale in fp32, round once
            else:
                g.mul_(s.to(g.dtype))
            # a tensor left alone keeps its pre-clip norm exactly (re-summing rows rounds)
            pre = res.per_tensor_norm[i].float()
            post.append(torch.where((s < 1).any(), ((g_norm * s) ** 2).sum().sqrt(), pre))
        scale = _per_tensor_scale(res.per_tensor_norm.float(), torch.stack(post))
        return ClipResult(res.total_norm, res.per_tensor_norm, scale, res.nonfinite, res.impl)


@register
class SPAM(_Adaptive):
    """SPAM's spike-aware element clipping against Adam's ``v`` and its periodic moment reset."""

    name, label, color = "spam", "SPAM", "#e377c2"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.optimizer: torch.optim.Optimizer | None = None
        self.calls = 0  # updates so far: the reset schedule counts updates, a host number

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def __call__(self, params: Sequence[torch.Tensor]) -> ClipResult:
        if self.optimizer is None:
            raise ValueError(
                "clip mode 'spam' reads Adam's v: make_clipper('spam', optimizer=opt), "
                "or clipper.bind(opt) before the first call"
            )
        return super().__call__(params)

    def _apply(self, params: list[torch.Tensor], res: ClipResult) -> ClipResult:
        assert self.optimizer is not None
        self.calls += 1
        p = self.params
        since_reset = self.calls % p.spam_reset
        reset = since_reset == 0
        scale = torch.ones_like(res.total_norm)
        # no clipping for spam_warmup updates after a reset, and as many at the start
        if since_reset >= p.spam_warmup and self.calls > p.spam_warmup:
            state = self.optimizer.state
            clipped = torch.stack(
                [spam_clip_(w.grad, _v_of(state, w), p.spam_theta) for w in params]
            )
            post = torch.stack(torch._foreach_norm([w.grad for w in params])).float()
            pre = res.per_tensor_norm.float()
            # exactly 1 where nothing was clipped: a second norm pass differs in rounding
            scale = torch.where(clipped, _per_tensor_scale(pre, post), torch.ones_like(pre))
        if reset:
            self._reset_moments()
        return ClipResult(
            res.total_norm, res.per_tensor_norm, scale, res.nonfinite, res.impl, moments_reset=reset
        )

    @torch.no_grad()
    def _reset_moments(self) -> None:
        """Adam's m, v and step count to zero: the next step is a first step again."""
        assert self.optimizer is not None
        for st in self.optimizer.state.values():
            for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if key in st:
                    st[key].zero_()
            if torch.is_tensor(st.get("step")):
                st["step"].zero_()
            elif "step" in st:
                st["step"] = 0

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])


@register
class SkipUpdate(_Adaptive):
    """Skip the optimizer step when the norm is an outlier of its rolling window."""

    name, label, color = "skip", "skip-update", "#17becf"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = 0  # norms pushed into the window (host count of calls)
        self.window: torch.Tensor | None = None

    def _apply(self, params: list[torch.Tensor], res: ClipResult) -> ClipResult:
        p = self.params
        norm = res.total_norm.float()
        if self.window is None:
            self.window = torch.full((p.skip_window,), math.nan, device=norm.device)
        self.window = _to(self.window, norm)
        if self.seen >= p.skip_window // 2:
            skip = skip_decision(norm, self.window, p.skip_z)
        else:
            skip = torch.zeros((), dtype=torch.bool, device=norm.device)
        # the window takes every norm, the skipped ones too (as OLMo-core's does); a
        # non-finite one as NaN, a gap in the statistics (OLMo-core's keeps it: see above)
        slot = self.window[self.seen % p.skip_window]
        slot.copy_(torch.where(torch.isfinite(norm), norm, math.nan))
        self.seen += 1
        return ClipResult(
            res.total_norm, res.per_tensor_norm, torch.ones_like(norm), res.nonfinite, res.impl,
            skip=skip,
        )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "window": self.window}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen, self.window = int(state["seen"]), state["window"]
