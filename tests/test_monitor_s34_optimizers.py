"""The optimizer-state probe under optimizers a user's own loop has (session 34's audit, each
compared with the optimizer's own state):

- ``ClippedAdamW`` (the clip inside ``step()``): the spike terms were the *unclipped* gradient's,
  so a spike's share of ``v`` read 10x and past 1; now they are those of the clipped gradient
  AdamW received, the shares of ``clip_grad_norm_`` + ``torch.optim.AdamW``;
- ``add_param_group`` after a spike (a backbone unfrozen mid-run) crashed the probe
  ("zip() argument 2 is longer than argument 1") and left the pollution summary stale;
- Adam with weight decay (coupled L2) clipped *after* ``after_clip`` (Lightning's
  ``gradient_clip_val`` clips between its hook and the step): the spike terms were built from
  the unclipped gradient, and a share of ``v`` read 1,468;
- an optimizer without Adam moments (SGD, Adagrad...) summarised its pollution as 0.0, which
  reads as "no pollution": now None, not measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW
from andrea_diag.monitor import SpikeMonitor

SPIKE_AT, STEPS = 22, 40


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def _train(out: Path, make_opt: Callable, clip: float | None = None,
           at: Callable | None = None, kept: dict | None = None,
           clip_late: bool = False) -> dict:  # fmt: skip
    """STEPS updates with a forced spike at SPIKE_AT; the run's summary. ``kept``: gets the
    optimizer and every update's gradients."""
    model = _model()
    opt = make_opt(model)
    if kept is not None:
        kept["opt"] = opt
    g = torch.Generator().manual_seed(1)
    with SpikeMonitor(model, opt, out, lockin=False, moment_norms_every=1) as mon:
        for t in range(1, STEPS + 1):
            if at is not None:
                at(t, model, opt)
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
            scale = 3.0 if t == SPIKE_AT else 1.0
            loss = (model(x * scale) - y).square().mean() * scale
            loss.backward()
            mon.after_backward(loss)
            if clip_late:  # after_clip sees the unclipped gradients, the step the clipped ones
                mon.after_clip(None)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            else:
                total = torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
                mon.after_clip(total)
            if kept is not None:  # each update's gradient and θ before the step, by parameter
                kept[t] = {p: (p.grad.clone(), p.detach().clone())
                           for p in model.parameters() if p.grad is not None}  # fmt: skip
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return json.loads((out / "summary.json").read_text())


def test_clipped_adamw_gives_the_shares_of_clip_grad_norm_plus_adamw(tmp_path: Path) -> None:
    betas = (0.9, 0.95)
    ours = _train(tmp_path / "a", lambda m: ClippedAdamW(m.parameters(), lr=1e-2, betas=betas,
                                                         max_norm=0.5))  # fmt: skip
    peer = _train(tmp_path / "b", lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2,
                                                              betas=betas), clip=0.5)  # fmt: skip
    a, b = ours["pollution"], peer["pollution"]
    assert a["n_spikes_tracked"] == b["n_spikes_tracked"] >= 1
    for key in ("max_m_share", "max_v_share", "final_v_share"):
        assert a[key] == pytest.approx(b[key], rel=1e-4), key
        # v's terms are all >= 0, so its spikes' share is at most 1 (m's terms may cancel)
        assert 0.0 <= a[key] <= (1.0 if "v" in key else math.inf), key
    assert [s["recovery_m"] for s in a["per_spike"]] == [s["recovery_m"] for s in b["per_spike"]]


def _unfreeze_head(t: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    if t == SPIKE_AT + 3:  # as Lightning's BackboneFinetuning does
        model[2].requires_grad_(True)
        opt.add_param_group({"params": list(model[2].parameters())})


def _head_frozen_adam(model: torch.nn.Module) -> torch.optim.Optimizer:
    model[2].requires_grad_(False)
    return torch.optim.Adam(model[0].parameters(), lr=1e-2)


def test_a_group_added_after_a_spike_keeps_the_probe_and_its_shares(tmp_path: Path) -> None:
    kept: dict = {}
    summary = _train(tmp_path / "r", _head_frozen_adam, at=_unfreeze_head, kept=kept)
    assert summary["probe_failures"] == []
    poll = summary["pollution"]
    spikes = [s["update"] for s in poll["per_spike"]]
    assert SPIKE_AT in spikes and max(spikes) > SPIKE_AT + 2  # spikes before and after it
    # the truth from the optimizer's own state: the spikes' terms of v, (1-β2)·β2^k·g², over
    # the parameters each spike had (the head has none before its group), against ‖v‖ now
    assert poll["final_v_share"] == pytest.approx(_true_v_share(kept, spikes), rel=1e-5)


def _true_v_share(kept: dict, spikes: list[int], wd: float = 0.0, maximize: bool = False) -> float:
    """The spikes' share of ‖v‖ at the end, from the optimizer's own state: each spike's term
    (1-β2)·β2^k·g², g the gradient Adam received (-grad under maximize, + wd·θ for coupled L2),
    over the parameters it had then (a group added later has none), against ‖v‖ now."""
    opt = kept["opt"]
    b2 = opt.param_groups[0]["betas"][1]
    terms: dict = {}
    for u in spikes:
        for p, (grad, theta) in kept[u].items():
            g = (-grad if maximize else grad).double() + wd * theta.double()
            terms[p] = terms.get(p, 0) + (1 - b2) * b2 ** (STEPS - u) * g**2
    v_all = [opt.state[p]["exp_avg_sq"].double() for grp in opt.param_groups for p in grp["params"]]
    norm = lambda ts: math.sqrt(sum(float(t.square().sum()) for t in ts))  # noqa: E731
    return norm(terms.values()) / norm(v_all)


PEERS = {
    "adam-foreach": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, foreach=True),
    "adam-loop": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, foreach=False),
    "adamw-fused": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True),
    "nadam": lambda m: torch.optim.NAdam(m.parameters(), lr=1e-2),
    "radam": lambda m: torch.optim.RAdam(m.parameters(), lr=1e-2),
    "adam-wd-maximize": lambda m: torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=0.1,
                                                   maximize=True),
    "adam-wd": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PEERS))
def test_the_spikes_share_of_v_is_the_optimizers_own(tmp_path: Path, name: str) -> None:
    kept: dict = {}
    poll = _train(tmp_path / "r", PEERS[name], kept=kept)["pollution"]
    spikes = [s["update"] for s in poll["per_spike"]]
    assert spikes, "no spike tracked: the forced one at SPIKE_AT should be"
    group = kept["opt"].param_groups[0]
    want = _true_v_share(kept, spikes, group["weight_decay"] if "wd" in name else 0.0,
                         group.get("maximize", False))  # fmt: skip
    assert poll["final_v_share"] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("make", [lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9),
                                  lambda m: torch.optim.Adagrad(m.parameters(), lr=1e-2)],
                         ids=["sgd", "adagrad"])  # fmt: skip
def test_an_optimizer_without_adam_moments_has_its_pollution_not_measured(
    tmp_path: Path, make: Callable
) -> None:
    poll = _train(tmp_path / "r", make)["pollution"]
    assert poll["has_moments"] is False
    assert poll["max_m_share"] is None and poll["max_v_share"] is None
    assert poll["final_v_share"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in poll.values())


@pytest.mark.parametrize("maximize", [False, True])
def test_a_clip_after_after_clip_reaches_the_spike_terms_of_adam_with_weight_decay(
    tmp_path: Path, maximize: bool
) -> None:
    def adam(m: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1, maximize=maximize)

    late = _train(tmp_path / "late", adam, clip=0.5, clip_late=True)["pollution"]
    given = _train(tmp_path / "given", adam, clip=0.5)["pollution"]  # the documented order
    assert late["n_spikes_tracked"] == given["n_spikes_tracked"] >= 1
    for key in ("max_m_share", "max_v_share", "final_v_share"):
        assert late[key] == pytest.approx(given[key], rel=1e-6), key
        assert 0.0 <= late[key] <= (1.0 if "v" in key else math.inf), key


def test_an_optimizer_of_some_trainable_parameters_has_their_moments_read(tmp_path: Path) -> None:
    kept: dict = {}  # the head alone is optimized; the first layer still gets gradients
    summary = _train(tmp_path / "r", lambda m: torch.optim.Adam(m[2].parameters(), lr=1e-2),
                     kept=kept)  # fmt: skip
    assert summary["pollution"]["has_moments"] is True
    rows = [
        json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    ]
    last = [r for r in rows if r.get("update") == STEPS and r.get("v_norm") is not None]
    opt = kept["opt"]
    v = [opt.state[p]["exp_avg_sq"].double() for p in opt.param_groups[0]["params"]]
    assert last and last[0]["v_norm"] == pytest.approx(
        math.sqrt(sum(float(t.square().sum()) for t in v)), rel=1e-6
    )


CYCLE = 60  # a spike's m share recovers ~29 updates after it


def _one_cycle(out: Path, scheduler_first: bool) -> dict:
    """AdamW under OneCycleLR (it cycles β1 by default), a spike at SPIKE_AT; the scheduler
    steps before or after ``after_step``."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=CYCLE + 1)
    g = torch.Generator().manual_seed(1)
    with SpikeMonitor(model, opt, out, lockin=False, moment_norms_every=1) as mon:
        for t in range(1, CYCLE + 1):
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
            scale = 3.0 if t == SPIKE_AT else 1.0
            loss = (model(x * scale) - y).square().mean() * scale
            loss.backward()
            mon.after_backward(loss)
            mon.after_clip(None)
            opt.step()
            if scheduler_first:
                sched.step()
            mon.after_step()
            if not scheduler_first:
                sched.step()
            opt.zero_grad()
    return json.loads((out / "summary.json").read_text())["pollution"]


def test_scheduled_betas_decay_a_spike_by_the_betas_each_step_used(tmp_path: Path) -> None:
    first = _one_cycle(tmp_path / "a", scheduler_first=True)
    after = _one_cycle(tmp_path / "b", scheduler_first=False)
    assert [s["update"] for s in after["per_spike"]] == [SPIKE_AT]
    # one spike: its own recovery is the shadow's exact one (β^k with β1 moving read it as
    # censored), whichever side of after_step the scheduler steps on
    assert after["recovery_m"] == after["recovery_m_all"] is not None
    assert first["per_spike"] == after["per_spike"]
    assert first["max_m_share"] == pytest.approx(after["max_m_share"], rel=1e-9)
