"""Adam-state pollution: shadow-buffer shares equal the closed-form spike contributions."""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.optstate import OptStateProbe

SPIKES = (10, 20)
BETAS = [(0.9, 0.999), (0.9, 0.999), (0.8, 0.99)]  # per tensor: a, b share group 0; c is group 1


class _NullRecorder:
    def log(self, row):
        pass

    event = sample = log


def _setup(opt_cls, betas=BETAS, **kw):
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(5, 4))
    b = torch.nn.Parameter(torch.randn(7))
    c = torch.nn.Parameter(torch.randn(3, 3))
    groups = [
        {"params": [a, b], "betas": betas[0]},
        {"params": [c], "betas": betas[2]},  # a second group with its own betas
    ]
    return [a, b, c], opt_cls(groups, lr=1e-2, **kw)


def _train(
    opt_cls,
    steps=30,
    shadow=True,
    spikes=SPIKES,
    betas=BETAS,
    keep_state=True,
    defer=False,
    norms_every=1,
    resets=(),
    **kw,
):
    """Adam(W) on three tensors; big gradients at ``spikes``. Returns rows, probe, received grads.

    ``keep_state=False`` keeps m and v (for the closed form) only from the first spike on.
    ``norms_every``: the probe's ``moment_norms_every``. ``resets``: updates whose clip mode
    zeroes m and v first, as SPAM does (the probe reads ``moments_reset`` from the clip).
    """
    params, opt = _setup(opt_cls, betas, **kw)
    probe = OptStateProbe(shadow=shadow, moment_norms_every=norms_every)
    probe.defer_reads = defer  # True: what the trainer's driver sets (read at the flush)
    gen = torch.Generator().manual_seed(1)
    rows, received, snaps = [], [], []
    for t in range(1, steps + 1):
        for p in params:
            p.grad = 0.1 * torch.randn(p.shape, generator=gen)
            if t in spikes:
                p.grad *= 50.0
        wd = opt.param_groups[0]["weight_decay"]
        coupled = wd and opt_cls is torch.optim.Adam
        received.append([p.grad + wd * p.detach() if coupled else p.grad.clone() for p in params])
        snaps.append([p.detach().clone() for p in params])
        row: dict = {}
        ctx = UpdateContext(
            update=t,
            model=torch.nn.Linear(1, 1),
            optimizer=opt,
            param_names=["h.0.attn.qkv.weight", "h.0.mlp.fc.bias", "lm_head.weight"],
            params=params,
            loss=1.0,
            example_loss=torch.zeros(0),
            example_source=torch.zeros(0),
            clip=_reset_clip() if t in resets else None,
            recorder=_NullRecorder(),  # type: ignore[arg-type]
            row=row,
            spike=t in spikes,  # what the spike probe would have decided online
        )
        if t in resets:
            for st in opt.state.values():
                st["exp_avg"].zero_()
                st["exp_avg_sq"].zero_()
        probe.after_clip(ctx)
        opt.step()
        probe.after_step(ctx)
        if keep_state or t >= min(spikes):
            row["_m"] = [opt.state[p]["exp_avg"].clone() for p in params]
            row["_v"] = [opt.state[p]["exp_avg_sq"].clone() for p in params]
        row["_delta"] = [p.detach() - s for p, s in zip(params, snaps[-1], strict=True)]
        rows.append(row)
    probe.resolve()  # deferred: the flush
    return rows, probe, received, params


def _reset_clip():
    """What a clip mode that zeroed Adam's moments reports (only ``moments_reset`` is read)."""
    from types import SimpleNamespace

    return SimpleNamespace(per_tensor_norm=torch.zeros(0), scale=torch.ones(()), moments_reset=True)


def _direct_share(t, received, rows, which, spikes=SPIKES, betas=BETAS):
    """‖Σ_spikes (1-β)·β^(t-s)·g_s(^2)‖ / ‖m_t (v_t)‖ from the formula, per tensor's betas."""
    num = 0.0
    for i, (b1, b2) in enumerate(betas):
        acc = torch.zeros_like(received[0][i], dtype=torch.float64)
        for s in spikes:
            if s <= t:
                g = received[s - 1][i].double()
                if which == "m":
                    acc += (1 - b1) * b1 ** (t - s) * g
                else:
                    acc += (1 - b2) * b2 ** (t - s) * g * g
        num += float(acc.square().sum())
    den = math.sqrt(sum(float(x.double().square().sum()) for x in rows[t - 1][f"_{which}"]))
    return math.sqrt(num) / den


@pytest.mark.parametrize(
    ("opt_cls", "kw"),
    [
        (torch.optim.Adam, {}),
        (torch.optim.Adam, {"weight_decay": 0.1}),  # coupled L2: g_s includes wd·θ
        (torch.optim.AdamW, {"weight_decay": 0.1}),  # decoupled: m, v see the raw gradient
    ],
)
def test_shadow_share_equals_direct_spike_contribution(opt_cls, kw):
    rows, probe, received, params = _train(opt_cls, **kw)
    for t in range(1, 31):
        for which in ("m", "v"):
            got = rows[t - 1][f"{which}_spike_share"]
            want = _direct_share(t, received, rows, which) if t >= SPIKES[0] else 0.0
            assert got == pytest.approx(want, rel=1e-4, abs=1e-9), (t, which)
    summary = probe.close(None)["pollution"]  # type: ignore[arg-type]
    assert summary["max_m_share"] == pytest.approx(max(r["m_spike_share"] for r in rows), rel=1e-9)
    n = sum(p.numel() for p in params)
    assert summary["shadow_bytes"] == 2 * 4 * n


def test_per_spike_recovery_matches_the_formula_and_censors_unrecovered_spikes():
    rows, probe, received, _ = _train(torch.optim.Adam, steps=90, shadow=False)
    per = probe.per_spike()
    assert set(per) == set(SPIKES)
    betas = [(0.9, 0.999), (0.9, 0.999), (0.8, 0.99)]
    for s in SPIKES:
        want = None
        for t in range(s, 91):
            num = sum(
                ((1 - b1) * b1 ** (t - s)) ** 2 * float(received[s - 1][i].double().square().sum())
                for i, (b1, _) in enumerate(betas)
            )
            den = math.sqrt(sum(float(x.double().square().sum()) for x in rows[t - 1]["_m"]))
            if math.sqrt(num) / den < 0.1:
                want = t - s
                break
        assert want is not None and per[s]["recovery_m"] == want
    # v decays with β2 = 0.999: 90 updates are not enough, so the spikes are censored
    summary = probe.close(None)["pollution"]  # type: ignore[arg-type]
    assert summary["recovery_v"] is None and summary["recovery_v_censored"] is True
    assert summary["recovery_m"] == max(per[s]["recovery_m"] for s in SPIKES)
    assert summary["shadow_bytes"] == 0 and "m_spike_share" not in rows[-1]


def test_moment_norms_update_rms_and_cosine_match_direct_computation():
    rows, _, received, _ = _train(torch.optim.Adam)
    for t in (1, 10, 30):
        r = rows[t - 1]
        m = math.sqrt(sum(float(x.double().square().sum()) for x in r["_m"]))
        assert r["m_norm"] == pytest.approx(m, rel=1e-5)
        d = torch.cat([x.reshape(-1).double() for x in r["_delta"]])
        g = torch.cat([x.reshape(-1).double() for x in received[t - 1]])
        assert r["update_rms"] == pytest.approx(float(d.norm() / math.sqrt(d.numel())), rel=1e-4)
        cos = float(torch.dot(-d, g) / (d.norm() * g.norm()))
        assert r["cos_update_grad"] == pytest.approx(cos, rel=1e-4, abs=1e-6)
    # Adam's first step is lr·sign(g), so the cosine is ‖g‖₁ / (√n·‖g‖₂)
    g1 = torch.cat([x.reshape(-1).double() for x in received[0]])
    first = float(g1.abs().sum() / (math.sqrt(g1.numel()) * g1.norm()))
    assert rows[0]["cos_update_grad"] == pytest.approx(first, rel=1e-3)
    assert "layer_m/h00.attention" in rows[0] and "layer_v/head.head" in rows[0]


def test_shadow_stays_exact_across_renormalisation():
    """β1 = 0.5 drives the lazy decay scalar below 1e-20 within 70 updates."""
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.5, 0.6))
    probe = OptStateProbe(shadow=True)
    share = []
    for t in range(1, 121):
        p.grad = torch.full((4,), 100.0 if t in (5, 100) else 1.0)
        row: dict = {}
        ctx = UpdateContext(
            t,
            torch.nn.Linear(1, 1),
            opt,
            ["w"],
            [p],
            1.0,
            torch.zeros(0),
            torch.zeros(0),
            None,
            _NullRecorder(),
            row,
            spike=t in (5, 100),  # type: ignore[arg-type]
        )
        probe.after_clip(ctx)
        opt.step()
        probe.after_step(ctx)
        share.append(row["m_spike_share"])
    # after spike 100: m = 0.5·m_99 + 0.5·100 with m_99 = 1 (spike 5 long gone): share = 50/50.5
    assert share[99] == pytest.approx(50 / 50.5, rel=1e-5)
    assert share[110] == pytest.approx(
        50 * 0.5**11 / (50 * 0.5**11 + (1 - 0.5**11) + 0.5**11 * 0.5), rel=1e-4
    )


# β2 = 0.95 leaves fp32 range (0.95^2000 ≈ 3e-45) as well as β1 = 0.9 (0.9^2000 ≈ 1e-92)
LATE_BETAS = [(0.9, 0.999), (0.9, 0.999), (0.8, 0.95)]


@pytest.mark.parametrize("spikes", [(2001,), (3, 2001)], ids=["first-spike-late", "long-gap"])
def test_a_spike_after_2000_quiet_updates_keeps_exact_shares_and_recovery(spikes):
    """Issue 11: the lazy decay scalars once overflowed (1-β)/c when the first spike came late."""
    steps = 2060
    rows, probe, received, _ = _train(
        torch.optim.Adam, steps=steps, spikes=spikes, betas=LATE_BETAS, keep_state=False
    )
    for t in (2001, 2002, 2010, 2030, steps):
        for which in ("m", "v"):
            want = _direct_share(t, received, rows, which, spikes, LATE_BETAS)
            got = rows[t - 1][f"{which}_spike_share"]
            assert got == pytest.approx(want, rel=1e-4, abs=1e-9), (t, which)
    # per-spike recovery of m: the first update at which the spike's own term is under 10%
    per = probe.per_spike()[2001]
    want_rec = None
    for t in range(2001, steps + 1):
        own = math.sqrt(
            sum(
                ((1 - b1) * b1 ** (t - 2001)) ** 2
                * float(received[2000][i].double().square().sum())
                for i, (b1, _) in enumerate(LATE_BETAS)
            )
        )
        den = math.sqrt(sum(float(x.double().square().sum()) for x in rows[t - 1]["_m"]))
        if own / den < 0.1:
            want_rec = t - 2001
            break
    assert want_rec is not None and per["recovery_m"] == want_rec
    assert all(math.isfinite(r["m_spike_share"]) for r in rows[2000:])


def test_final_v_share_is_the_spikes_share_of_v_at_the_last_update():
    """The pollution-event measure: exact with the shadow; without it, one spike's own share
    (equal to the shadow's with one spike, a lower bound with several)."""
    one = (10,)
    rows, probe, received, _ = _train(torch.optim.Adam, steps=30, spikes=one)
    exact = probe.close(None)["pollution"]  # type: ignore[arg-type]
    want = _direct_share(30, received, rows, "v", spikes=one)
    assert exact["final_v_share_exact"] is True
    assert exact["final_v_share"] == pytest.approx(want, rel=1e-4)
    assert exact["final_v_share"] > 0.5  # a 50x spike under β2 = 0.999 still holds v at 30
    _, bare, _, _ = _train(torch.optim.Adam, steps=30, spikes=one, shadow=False)
    single = bare.close(None)["pollution"]  # type: ignore[arg-type]
    assert single["final_v_share_exact"] is False
    assert single["final_v_share"] == pytest.approx(want, rel=1e-4)
    _, both, _, _ = _train(torch.optim.Adam, steps=30, shadow=True)
    _, lower, _, _ = _train(torch.optim.Adam, steps=30, shadow=False)
    full = both.close(None)["pollution"]["final_v_share"]  # type: ignore[arg-type]
    bound = lower.close(None)["pollution"]["final_v_share"]  # type: ignore[arg-type]
    assert 0 < bound < full


def test_final_v_share_is_zero_without_a_spike():
    _, probe, _, _ = _train(torch.optim.Adam, steps=12, spikes=())
    assert probe.close(None)["pollution"]["final_v_share"] == 0.0  # type: ignore[arg-type]


COLUMNS = ("m_norm", "v_norm", "m_spike_share", "v_spike_share", "update_rms", "cos_update_grad")


@pytest.mark.parametrize("shadow", [True, False])
def test_reads_deferred_to_the_flush_give_the_same_columns_and_summary(shadow):
    now, probe_now, _, _ = _train(torch.optim.Adam, steps=40, shadow=shadow)
    later, probe_later, _, _ = _train(torch.optim.Adam, steps=40, shadow=shadow, defer=True)
    for a, b in zip(now, later, strict=True):
        assert {k: a.get(k) for k in COLUMNS} == {k: b.get(k) for k in COLUMNS}
        assert {k: v for k, v in a.items() if k.startswith("layer_")} == {
            k: v for k, v in b.items() if k.startswith("layer_")
        }
    assert "m_norm" in later[-1]  # resolved, not missing
    assert probe_now.close(None) == probe_later.close(None)  # type: ignore[arg-type]


def test_one_flat_product_pass_gives_the_per_tensor_dots_total():
    from andrea_diag.probes.optstate_reads import snapshot_buffers, update_grad_dot

    torch.manual_seed(0)
    params = [torch.randn(5, 4), torch.randn(7), torch.randn(3, 3)]
    grads = [torch.randn_like(p) for p in params]
    per, no_flat = snapshot_buffers(params, flat_dot=False)
    views, flat = snapshot_buffers(params, flat_dot=True)
    assert no_flat is None and flat is not None and flat.numel() == 20 + 7 + 9
    assert [v.shape for v in views] == [p.shape for p in params]
    for bufs in (per, views):
        torch._foreach_copy_(bufs, params)
    want = update_grad_dot(per, None, grads)
    got = update_grad_dot(views, flat, grads)
    assert torch.allclose(got, want, rtol=1e-5) and got.dim() == 0


FAST = [(0.8, 0.8), (0.8, 0.8), (0.7, 0.7)]  # m and v forget a 50x spike within the run


@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("shadow", [False, True])
def test_the_moments_norms_on_a_schedule_give_the_recovery_of_norms_every_update(shadow, defer):
    """``moment_norms_every``: the rows with the norms are the full run's rows, value for value;
    the summary (first shares, recoveries, final share, maxima) is the full run's."""
    run = {"steps": 150, "betas": FAST, "shadow": shadow, "defer": defer}
    full, probe_full, _, _ = _train(torch.optim.Adam, **run)
    some, probe_some, _, _ = _train(torch.optim.Adam, norms_every=7, **run)
    kept = [t for t, r in enumerate(some, 1) if "m_norm" in r]
    assert set(range(7, 151, 7)) | set(SPIKES) <= set(kept)
    assert len(kept) < 100  # the schedule skipped rows once both spikes had recovered
    assert 150 not in kept  # the last update is off it: the close takes the final shares
    for a, b in zip(full, some, strict=True):
        moments = [k for k in a if k.startswith(("m_", "v_", "layer_m/", "layer_v/"))]
        if "m_norm" in b:
            assert {k: b[k] for k in moments} == {k: a[k] for k in moments}
        else:
            assert not any(k in b for k in moments)
        assert b.get("update_rms") == a.get("update_rms")  # its own schedule: unchanged
    assert probe_some.close(None) == probe_full.close(None)  # type: ignore[arg-type]
    per = probe_full.per_spike()
    assert all(r["recovery_m"] is not None and r["recovery_v"] is not None for r in per.values())
    if not shadow:  # every update from each spike to its recovery, and only those off schedule
        windows = {
            t
            for s, r in per.items()
            for t in range(s, s + max(r["recovery_m"], r["recovery_v"]) + 1)
        }
        assert set(kept) == set(range(7, 151, 7)) | windows


def test_a_moment_norms_schedule_below_one_is_refused():
    with pytest.raises(ValueError, match="moment_norms_every must be at least 1"):
        OptStateProbe(moment_norms_every=0)


@pytest.mark.parametrize("shadow", [False, True])
def test_a_reset_that_empties_the_moments_closes_the_spikes_windows_and_keeps_the_summary(shadow):
    """A reset (SPAM) ends every spike's term: its window closes, the rows after it are on the
    schedule again, and the summary (with the shadow: the final share of empty buffers, 0) is
    the full run's."""
    run = {"steps": 150, "betas": FAST, "shadow": shadow, "spikes": (10,), "resets": (148,)}
    _, probe_full, _, _ = _train(torch.optim.Adam, **run)
    some, probe_some, _, _ = _train(torch.optim.Adam, norms_every=7, **run)
    assert "m_norm" not in some[148] and "m_norm" not in some[149]  # updates 149 and 150
    early, _, _, _ = _train(torch.optim.Adam, norms_every=7, **(run | {"resets": (15,)}))
    assert [t for t, r in enumerate(early, 1) if "m_norm" in r][:8] == [
        7,
        10,
        11,
        12,
        13,
        14,
        15,
        21,
    ]
    assert probe_some.close(None) == probe_full.close(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("every", [1, 10])
def test_updates_skipped_before_the_first_step_leave_the_probe_running(tmp_path, every):
    """A skipped update before Adam's first step has no m and v, even when its row is resolved
    after later updates made them: its row has no norms, and the probe carries on."""
    import dataclasses
    import json

    from andrea_diag.bench.train import _engine
    from andrea_diag.config import ProbeConfig, RunConfig

    probes = ProbeConfig(lockin=False, moment_norms_every=every)
    cfg = RunConfig(size="tiny", device="cpu", probes=probes).resolve()
    cfg = dataclasses.replace(cfg, steps=12, eval_every=0, checkpoint_every=0,
                              inject=["nonfinite@1"])  # fmt: skip
    engine, _ = _engine(cfg, tmp_path / "run")
    summary = engine.run(lambda update, row: None)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert rows[0]["applied"] is False and "m_norm" not in rows[0]
    due = [r for r in rows[1:] if r["update"] % every == 0 or (r["spike"] and r["applied"])]
    assert due and all("m_norm" in r for r in due)
    assert "m_norm" in rows[-3]  # update 10
    assert summary.get("probe_failures", []) == [] and "pollution" in summary
