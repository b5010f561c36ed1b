"""Per-layer gradient norms equal the direct per-group norms, clip or no clip."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F

from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.model import GPT, param_group_of
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.layers import LayerGradNormProbe


def _backward():
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"])
    x = torch.randint(0, 8449, (2, 17))
    F.cross_entropy(model(x[:, :-1]).transpose(1, 2), x[:, 1:]).backward()
    names, params = (list(t) for t in zip(*model.named_parameters(), strict=True))
    direct: dict[str, float] = defaultdict(float)
    for n, p in zip(names, params, strict=True):
        direct["layer_gn/" + ".".join(param_group_of(n))] += float(p.grad.double().square().sum())
    return model, names, params, {k: math.sqrt(v) for k, v in direct.items()}


@pytest.mark.parametrize("clip_mode", ["global", "none", None])
def test_layer_grad_norms_equal_direct_per_group_norms(clip_mode):
    model, names, params, direct = _backward()  # direct: pre-clip
    clip = (
        clip_grad_norm_with_stats(params, 0.01, mode=clip_mode, impl="reference")
        if clip_mode
        else None
    )
    row: dict = {}
    ctx = UpdateContext(
        1,
        model,
        None,
        names,
        params,
        1.0,
        torch.zeros(0),
        torch.zeros(0),
        clip,
        None,
        row,  # type: ignore[arg-type]
    )
    LayerGradNormProbe().after_clip(ctx)
    got = {k: v for k, v in row.items() if k.startswith("layer_gn/")}
    assert set(got) == set(direct)
    assert {"layer_gn/h00.attention", "layer_gn/embed.embedding", "layer_gn/head.head"} <= set(got)
    assert "layer_gn/final.norm" in got
    for k in direct:
        assert got[k] == pytest.approx(direct[k], rel=1e-5), k


class _Copy:
    """A host copy that has landed or not (on the CPU every real one has)."""

    def __init__(self, values: torch.Tensor, landed: bool) -> None:
        self.values, self.landed, self.pinned = values, landed, True

    def ready(self) -> bool:
        return self.landed

    def wait(self) -> torch.Tensor:
        self.landed = True
        return self.values

    def release(self) -> None:
        self.released = True


def test_resolve_ready_fills_only_the_updates_before_the_first_copy_still_in_flight() -> None:
    probe = LayerGradNormProbe()
    probe.defer_reads = True
    rows: list[dict] = [{}, {}, {}]
    landed = [True, False, True]  # the third has landed, but rows are filled in update order
    for row, ok, v in zip(rows, landed, (1.0, 2.0, 3.0), strict=True):
        norms = torch.tensor([v])
        probe._queue.append((row, ["h00.mlp"], norms, _Copy(norms, ok)))
    copies = [q[3] for q in probe._queue]
    probe.resolve_ready()
    assert rows == [{"layer_gn/h00.mlp": 1.0}, {}, {}] and len(probe._queue) == 2
    # the copy read is handed back for reuse; the two still waiting are not
    assert [getattr(c, "released", False) for c in copies] == [True, False, False]
    probe.resolve()  # the flush: waits for the rest
    assert [r["layer_gn/h00.mlp"] for r in rows] == [1.0, 2.0, 3.0] and not probe._queue
    assert all(c.released for c in copies)
