"""What the framework callbacks share: one update's pre-clip norms, loss and clip record.

A framework owns its loop, so its callbacks see one optimizer update from the outside. They run
the same probes as ``SpikeMonitor`` (``andrea_diag.monitor``, through the same ``ProbeDriver``)
by feeding it what it needs at the two points the probes require:

- ``after_clip``: the gradient is final and the optimizer has not stepped. The probes want the
  **pre-clip** norms (a spike is a spike of the raw gradient) and the **post-clip** gradient
  (what Adam receives). :class:`UpdateCapture` builds the :class:`~andrea_diag.clip.api.ClipResult`
  from both: ``total_norm``/``per_tensor_norm`` before clipping, ``scale`` = post / pre per
  tensor, measured, not assumed (the framework may clip by norm, by value, or not at all).
- ``after_step``: parameters and ``m``/``v`` updated, gradients still in ``.grad``.

:class:`PreClipNorms` keeps the per-tensor norms as the last backward leaves them, through
``register_post_accumulate_grad_hook``: the only way to see them under a framework that clips
before its first callback (Hugging Face's ``Trainer``). One norm per parameter per microbatch,
kept on the device (no host sync).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from andrea_diag.clip.api import ClipResult
from andrea_diag.clip.from_total import MIN_TOLERANCE
from andrea_diag.clip.reference import clip_reference
from andrea_diag.monitor import SpikeMonitor, trainable

IGNORE = -100  # the label id Hugging Face and Lightning users mask with (as train/accumulation)


def per_tensor_norms(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """(n,) L2 norms of the gradients of ``params`` (the clipper's own reduction, measuring)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    return clip_reference(grads, math.inf, apply=False)[1] if grads else torch.zeros(0)


class PreClipNorms:
    """Each parameter's gradient norm right after its last accumulation (before any clipping)."""

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.norms: dict[int, torch.Tensor] = {}
        self.handles: list[Any] = []
        self.hooked: set[int] = set()
        self.watch(params)

    def watch(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Hook the parameters of ``params`` not hooked yet (a layer unfrozen mid-run)."""
        for p in params:
            if id(p) not in self.hooked:
                self.hooked.add(id(p))
                self.handles.append(p.register_post_accumulate_grad_hook(self._hook))

    def _hook(self, p: torch.Tensor) -> None:
        # overwritten every microbatch: after the group's last backward it is the full gradient
        self.norms[id(p)] = torch.linalg.vector_norm(p.grad.detach().float())

    def take(
        self, params: Sequence[torch.Tensor], unscale: float = 1.0, post: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(n,) norms of ``params`` that have a gradient, in their order; then forget them.
        ``post``: the same parameters' norms now, taken for one whose hook never ran (unfrozen
        after this update's backward began: its pre-clip norm was not seen; a KeyError was)."""
        with_grad = [p for p in params if p.grad is not None]
        per = [
            self.norms[id(p)] / unscale if id(p) in self.norms or post is None else post[i]
            for i, p in enumerate(with_grad)
        ]
        self.norms.clear()
        return torch.stack(per) if per else torch.zeros(0)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal-LM token loss per sequence, shifted as Hugging Face models shift it.

    Returns (sum of token losses (B,), supervised tokens (B,)), detached, in fp32.
    """
    logits = logits[:, :-1].detach().float()  # (B, T-1, V): position t predicts label t+1
    target = labels[:, 1:].to(logits.device)  # (B, T-1)
    tok = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        target.reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    ).view_as(target)
    return tok.sum(dim=1), (target != IGNORE).sum(dim=1)


class UpdateCapture:
    """One update at a time into a :class:`SpikeMonitor`: losses in, clip record, step."""

    def __init__(
        self,
        monitor: SpikeMonitor,
        params: Sequence[torch.nn.Parameter],
        impl: str,
        accumulate: int | None = None,
    ):
        """``accumulate``: the framework's microbatches per update, when every microbatch's
        loss it hands over is already divided by it (Lightning): a shorter last group (an
        epoch that is not a multiple of it) is then rescaled to the mean of its microbatches."""
        self.monitor, self.params, self.impl = monitor, list(params), impl
        self.accumulate = accumulate
        self.loss_sums: list[torch.Tensor] = []
        self.tokens: list[torch.Tensor] = []
        self.loss_total = 0.0  # for frameworks that give only a scalar loss per microbatch
        self.n_losses = 0  # microbatches whose scalar loss was added this update
        self.clip: ClipResult | None = None

    def add_examples(self, loss_sums: torch.Tensor, tokens: torch.Tensor) -> None:
        self.loss_sums.append(loss_sums)
        self.tokens.append(tokens)

    def add_loss(self, loss: torch.Tensor | float) -> None:
        """A microbatch's share of the update's loss (already divided by the microbatches)."""
        self.loss_total += float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        self.n_losses += 1

    def before_step(
        self, pre: torch.Tensor, post: torch.Tensor | None = None, loss_scale: float = 1.0
    ) -> None:
        """``after_clip`` with the pre-clip per-tensor norms; ``post`` when already clipped;
        ``loss_scale``: what the scalar losses were multiplied by (Lightning hands over the
        GradScaler's scaled loss under ``16-mixed``)."""
        self.loss_total /= loss_scale
        if self.tokens:  # token-weighted over the group, as the toolkit's trainer defines it
            sums, tok = torch.cat(self.loss_sums), torch.cat(self.tokens)
            loss: float = float(sums.sum() / tok.sum().clamp(min=1))  # host sync
            per_example = sums / tok.clamp(min=1)
        else:
            loss, per_example = self.loss_total, None
            if self.accumulate and 0 < self.n_losses < self.accumulate:
                # each share was loss_i / A, but only n < A microbatches came: mean = sum·A/n
                loss = loss * self.accumulate / self.n_losses
        microbatches = len(self.tokens) or self.n_losses  # forwards (or losses) this update
        if self.accumulate and not microbatches:
            # Lightning stepped without one backward (every training_step of the group
            # returned None, its way to skip a batch): no loss, where 0.0 was recorded
            loss = math.nan
        self.loss_sums, self.tokens, self.loss_total, self.n_losses = [], [], 0.0, 0
        total = _l2(pre)
        self.clip = ClipResult(
            total_norm=total,
            per_tensor_norm=pre,
            scale=torch.ones_like(pre),
            nonfinite=~torch.isfinite(total),
            impl=self.impl,
        )
        if post is not None:
            self._set_post(post)
        self.monitor.after_backward(loss, per_example_loss=per_example)
        self.monitor.after_clip(self.clip)
        if microbatches or self.accumulate:  # one after_backward for the group: it says 1
            self.monitor.add_columns(microbatches=microbatches)

    def after_step(self, post: torch.Tensor | None = None, applied: bool | None = None) -> None:
        """``after_step``; ``post``: the post-clip norms, when the clip ran after ``before_step``;
        ``applied``: the monitor's (False: the optimizer changed nothing this update)."""
        if self.clip is None:
            return
        if post is not None:
            self._set_post(post)
        # the total's own reduction (before_step's): with every scale 1 it is the same number
        post = float(_l2(self.clip.per_tensor_norm * self.clip.scale))
        total = float(self.clip.total_norm)
        self.monitor.add_columns(
            grad_norm_post=post,
            clip_coef=post / total if total > 0 and math.isfinite(total) else 1.0,
        )
        self.monitor.after_step(applied)
        self.clip = None

    def _set_post(self, post: torch.Tensor) -> None:
        """Per-tensor scale = post / pre, in place: the optimizer-state probe reads it at
        ``after_step`` for the norms of the gradient Adam received."""
        assert self.clip is not None
        pre = self.clip.per_tensor_norm
        ratio = torch.where(pre > 0, post.to(pre) / pre.clamp(min=1e-30), torch.ones_like(pre))
        # pre and post are two reductions of one tensor: unclipped, they differ in the last
        # bits, and a ratio of 1 - 1e-7 would record a clip that never ran (clip/from_total)
        ratio = torch.where((ratio - 1).abs() <= MIN_TOLERANCE, torch.ones_like(ratio), ratio)
        self.clip.scale.copy_(ratio)


def _l2(per_tensor: torch.Tensor) -> torch.Tensor:
    """The global L2 norm of per-tensor norms (summed in float64, one float32 rounding)."""
    return per_tensor.double().square().sum().sqrt().float()


def probe_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the monitor watches, in its order (trainable ones: ``monitor.trainable``)."""
    return trainable(model)[1]


def monitor_meta(framework: str, version: str, hooks: dict[str, str]) -> dict[str, Any]:
    """``config.json`` fields that say which framework ran and where the probes were hooked."""
    return {"framework": framework, "framework_version": version, "hooks": hooks}
