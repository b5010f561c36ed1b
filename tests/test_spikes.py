"""Spike detection and attribution: injected outliers, non-finite batches, cascades, score."""

from __future__ import annotations

import json
import math

import pytest
import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.spike_stats import batch_outlier, spike_score
from andrea_diag.probes.spikes import SpikeProbe, warmup_for
from andrea_diag.record import Recorder


def _ctx(rec, update, loss, grad_norm, example_loss, *, phase=0, boundary=False, applied=True):
    clip = ClipResult(
        torch.tensor(grad_norm),
        torch.tensor([grad_norm]),
        torch.tensor(1.0),
        torch.tensor(not math.isfinite(grad_norm)),
        "test",
    )
    return UpdateContext(
        update=update,
        model=torch.nn.Linear(1, 1),
        optimizer=None,  # type: ignore[arg-type]
        param_names=["w"],
        params=[],
        loss=loss,
        example_loss=example_loss,
        example_source=torch.arange(example_loss.numel()) % 3,
        clip=clip,
        recorder=rec,
        row={"update": update, "loss": loss, "grad_norm": grad_norm},
        phase=phase,
        boundary=boundary,
        weights={"repo-docs": 0.2, "gutenberg": 0.3, "hermes3-general": 0.5},
        applied=applied,
    )


def _run(tmp_path, n=80, special=None, boundaries=()):
    """n synthetic updates with mild noise; ``special[u]`` overrides (loss, gn, ex, applied)."""
    rec = Recorder(tmp_path / "run", {"kind": "test"})
    probe = SpikeProbe(window=50, z_thresh=6.0, boundary_k=3)
    g = torch.Generator().manual_seed(0)
    phase = 0
    flags = {}
    for u in range(1, n + 1):
        loss = 3.0 + 0.05 * float(torch.randn((), generator=g))
        gn = 1.0 + 0.05 * float(torch.randn((), generator=g))
        ex = 3.0 + 0.1 * torch.randn(16, generator=g)
        applied = True
        if special and u in special:
            loss, gn, ex, applied = special[u](loss, gn, ex)
        boundary = u in boundaries
        phase += boundary
        ctx = _ctx(rec, u, loss, gn, ex, phase=phase, boundary=boundary, applied=applied)
        probe.after_clip(ctx)
        probe.after_step(ctx)
        flags[u] = ctx.spike
    summary = probe.close(tmp_path / "run")["spikes"]
    rec.close(summary)
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    return summary, events, flags


def _outlier(loss, gn, ex):
    ex = ex.clone()
    ex[5] = 12.0  # one sequence far above the batch
    return loss + 9.0 / 16, 20.0, ex, True


def test_injected_outlier_batch_is_flagged_online_and_attributed_to_the_outlier(tmp_path):
    summary, events, flags = _run(tmp_path, special={60: _outlier})
    assert flags[60] and sum(flags.values()) == 1  # decided online, no false positives
    assert summary["spike_updates"] == [60]
    grad = [e for e in events if e["metric"] == "grad_norm"]
    assert len(grad) == 1 and grad[0]["causes"] == ["outlier"] and grad[0]["cause"] == "outlier"
    assert (
        grad[0]["outlier_example"] == 5 and grad[0]["outlier_source"] == "hermes3-general"
    )  # 5 % 3
    assert grad[0]["z"] > 6 and grad[0]["w_gutenberg"] == 0.3
    assert summary["by_cause"]["outlier"] == len(events) and summary["by_cause"]["unexplained"] == 0


def test_injected_nonfinite_batch_is_a_numerical_event_even_during_warmup(tmp_path):
    def bad(loss, gn, ex):
        return math.inf, math.nan, ex, False

    summary, events, _ = _run(tmp_path, special={2: bad, 70: bad})
    assert summary["spike_updates"] == [2, 70]
    for e in events:
        assert "numerical" in e["causes"] and e["z"] is None
    assert {e["metric"] for e in events if e["update"] == 70} == {"loss", "grad_norm"}
    assert summary["by_cause"]["numerical"] == len(events) == summary["n_spikes"]


def test_skipped_update_with_finite_values_is_still_a_numerical_event(tmp_path):
    _, events, _ = _run(tmp_path, special={40: lambda lo, gn, ex: (lo, gn, ex, False)})
    assert [(e["update"], e["cause"]) for e in events] == [(40, "numerical")]


def test_spikes_after_successive_boundaries_form_one_cascade(tmp_path):
    def jump(loss, gn, ex):
        return loss, 10.0, ex, True

    special = {61: jump, 69: jump, 78: jump, 100: jump}
    summary, events, _ = _run(tmp_path, n=110, special=special, boundaries=(60, 68, 76, 90, 99))
    by_update = {e["update"]: e for e in events}
    assert set(by_update) == {61, 69, 78, 100}
    assert by_update[61]["cascade"] == by_update[69]["cascade"] == by_update[78]["cascade"] == 0
    assert by_update[100]["cascade"] is None  # boundary 90 had no spike: not successive
    assert by_update[100]["causes"] == ["phase-transition"]
    assert summary["n_cascades"] == 1 and summary["by_cause"]["phase-transition"] == 4


def test_unexplained_spike_when_no_cause_applies(tmp_path):
    _, events, _ = _run(tmp_path, special={55: lambda lo, gn, ex: (lo, 9.0, ex, True)})
    assert [e["cause"] for e in events] == ["unexplained"]


def test_no_z_before_warmup():
    assert warmup_for(50) == 10 and warmup_for(10) == 5


def test_spike_score_matches_a_hand_computed_example():
    # window 4, 2 std, scored once 4 values precede:
    # i=4: prev [1,3,1,3] mean 2, std 1     -> |2-2| = 0 < 2        no
    # i=5: prev [3,1,3,2] mean 2.25, std 0.829 -> |10-2.25| >= 1.66  spike   -> 1/2 = 50 %
    assert spike_score([1, 3, 1, 3, 2, 10], window=4, n_std=2, min_history=4) == pytest.approx(50.0)
    # OLMo defaults: 60 alternating values then one 7-sigma jump; 11 values scored (50..60)
    vals = [1.0, 2.0] * 30 + [10.0]
    assert spike_score(vals) == pytest.approx(100 / 11)
    assert spike_score(vals[:40]) is None  # shorter than the warm-up: nothing scored
    # a non-finite value after the warm-up counts as a spike
    assert spike_score([1.0, 2.0] * 30 + [math.nan]) == pytest.approx(100 / 11)


def test_batch_outlier_finds_the_worst_example_and_nonfinite_wins():
    ex = torch.full((16,), 3.0) + 0.1 * torch.randn(16, generator=torch.Generator().manual_seed(1))
    ex[3] = 9.0
    idx, z = batch_outlier(ex)
    assert idx == 3 and z > 20
    ex[7] = math.inf
    assert batch_outlier(ex) == (7, math.inf)


def test_a_source_that_is_always_harder_is_not_an_outlier(tmp_path):
    rec = Recorder(tmp_path / "run", {"kind": "test"})
    probe = SpikeProbe(window=50, z_thresh=6.0, boundary_k=3)
    g = torch.Generator().manual_seed(1)
    src = torch.arange(16) % 3
    causes = {}
    for u in range(1, 81):
        ex = 3.0 + 0.1 * torch.randn(16, generator=g) + 2.0 * (src == 2)  # source 2: harder
        gn = 20.0 if u == 60 else 1.0 + 0.05 * float(torch.randn((), generator=g))
        if u == 70:
            ex[4] = 14.0  # a real outlier for its source
            gn = 20.0
        ctx = _ctx(rec, u, float(ex.mean()), gn, ex)
        probe.after_clip(ctx)
        probe.after_step(ctx)
    probe.close(tmp_path / "run")
    rec.close()
    for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        causes.setdefault(e["update"], set()).update(e["causes"])
    assert causes[60] == {"unexplained"}  # harder source, not an outlier example
    assert "outlier" in causes[70]
    # against the raw batch the harder source's max would have looked like an outlier
    _, raw_z = batch_outlier(3.0 + 0.1 * torch.randn(16, generator=g) + 2.0 * (src == 2))
    assert raw_z is not None and raw_z > 5.0


def test_the_memoized_window_scales_equal_a_fresh_robust_z_every_update_and_after_a_load(
    tmp_path,
):
    from andrea_diag.probes.base import robust_scale, robust_z
    from andrea_diag.probes.spikes import REL_FLOOR

    rec = Recorder(tmp_path / "run", {"kind": "test"})
    probe = SpikeProbe(window=20, z_thresh=6.0)
    g = torch.Generator().manual_seed(1)
    compared = 0
    for u in range(1, 120):
        if u % 17 == 0:  # a resumed probe: new windows under the same version count
            fresh = SpikeProbe(window=20, z_thresh=6.0)
            state = probe.state_dict()
            fresh._version, fresh._scales = probe._version, {"loss": (probe._version, (0.0, 1.0))}
            fresh.load_state_dict(state)
            probe = fresh
        for metric in ("loss", "grad_norm", "excess"):
            win = list(probe._win[metric])
            if len(win) < probe.warmup:
                continue
            assert probe.window_scale(metric) == robust_scale(win, REL_FLOOR)
            assert probe._z(metric, 3.3) == robust_z(3.3, win, REL_FLOOR)
            compared += 1
        loss = 3.0 + 0.05 * float(torch.randn((), generator=g))
        ex = 3.0 + 0.1 * torch.randn(16, generator=g)
        ctx = _ctx(rec, u, loss, 1.0 + 0.05 * float(torch.randn((), generator=g)), ex)
        probe.after_clip(ctx)
    rec.close({})
    assert compared > 250  # every update past the warm-up, every window
