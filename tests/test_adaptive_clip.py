"""The adaptive clip modes (clip/adaptive.py): each formula against hand-computed values, the
state each mode carries across updates, and the library contract (ClipResult, step_unless)."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from andrea_diag.clip.adaptive import (
    agc_scale,
    skip_decision,
    spam_clip_,
    step_unless,
    unit_norms,
    zclip_ema,
    zclip_scale,
)
from andrea_diag.clip.modes import CLIPPERS, make_clipper
from andrea_diag.clip_params import ClipParams

T = torch.tensor


def _param(values: list[float], grad: list[float]) -> torch.nn.Parameter:
    p = torch.nn.Parameter(T(values, dtype=torch.float32))
    p.grad = T(grad, dtype=torch.float32)
    return p


def _set_norm(p: torch.nn.Parameter, norm: float) -> None:
    """A gradient along (3, 4) / 5 with the given norm."""
    p.grad = T([0.6 * norm, 0.8 * norm])


# -- ZClip --------------------------------------------------------------------------------------
def test_zclip_scales_an_outlier_to_mean_plus_z_squared_std_over_z() -> None:
    # mean 1, std 0.2, z_t 2.5, norm 2: z = 1/0.2 = 5; target = 1 + 6.25*0.2/5 = 1.25
    scale, value = zclip_scale(T(2.0), T(1.0), T(0.04), 2.5)
    assert float(value) == pytest.approx(1.25, rel=1e-5)
    assert float(scale) == pytest.approx(1.25 / 2.0, rel=1e-5)


def test_zclip_leaves_an_ordinary_norm_alone() -> None:
    # norm 1.4: z = 0.4/0.2 = 2 < 2.5
    scale, value = zclip_scale(T(1.4), T(1.0), T(0.04), 2.5)
    assert float(scale) == 1.0 and float(value) == pytest.approx(1.4)


def test_zclip_ema_takes_the_clipped_value() -> None:
    # mean 0.97*1 + 0.03*1.25 = 1.0075; var 0.97*0.04 + 0.03*(1.25-1.0075)^2 = 0.0405641875
    mean, var = zclip_ema(T(1.0, dtype=torch.float64), T(0.04, dtype=torch.float64), T(1.25), 0.97)
    assert float(mean) == pytest.approx(1.0075)
    assert float(var) == pytest.approx(0.0405641875)


def test_zclip_ema_ignores_a_non_finite_norm() -> None:
    mean, var = zclip_ema(T(1.0), T(0.04), T(math.inf), 0.97)
    assert float(mean) == 1.0 and float(var) == pytest.approx(0.04)


def test_zclip_warms_up_then_clips_and_carries_its_ema() -> None:
    p = _param([0.0, 0.0], [0.0, 0.0])
    clip = make_clipper("zclip", params=ClipParams(zclip_warmup=3))
    for n in (1.0, 2.0, 10.0):  # warm-up: recorded, never clipped (10 passes untouched)
        _set_norm(p, n)
        res = clip([p])
        assert float(res.post_norm) == pytest.approx(n)
        assert float(torch.linalg.vector_norm(p.grad)) == pytest.approx(n)
    # the warm-up statistics are the population mean and variance of (1, 2, 10), the 10
    # included, as ZClip's initialisation does: mean 13/3, var 146/9
    assert float(clip.mean) == pytest.approx(13 / 3)
    assert float(clip.var) == pytest.approx(146 / 9)
    mean, var = 13 / 3, float(clip.var)
    std = math.sqrt(var)
    _set_norm(p, 40.0)
    z = (40.0 - mean) / (std + 1e-6)
    target = mean + 6.25 * std / z
    res = clip([p])
    assert float(torch.linalg.vector_norm(p.grad)) == pytest.approx(target, rel=1e-5)
    assert float(res.post_norm) == pytest.approx(target, rel=1e-5)
    assert float(res.total_norm) == pytest.approx(40.0)
    # the EMA moved towards the clipped norm, not towards 40
    assert float(clip.mean) == pytest.approx(0.97 * mean + 0.03 * target, rel=1e-6)


def test_zclip_state_dict_resumes_the_same_decisions() -> None:
    p = _param([0.0, 0.0], [0.0, 0.0])
    a = make_clipper("zclip", params=ClipParams(zclip_warmup=3))
    for n in (1.0, 2.0, 1.5, 1.7):
        _set_norm(p, n)
        a([p])
    b = make_clipper("zclip", params=ClipParams(zclip_warmup=3))
    b.load_state_dict(a.state_dict())
    for n in (9.0, 1.6, 30.0):
        _set_norm(p, n)
        ra = a([p]).post_norm
        _set_norm(p, n)
        rb = b([p]).post_norm
        assert float(ra) == pytest.approx(float(rb))
    assert float(a.mean) == pytest.approx(float(b.mean))


# -- AGC ----------------------------------------------------------------------------------------
def test_agc_clips_each_unit_to_lambda_times_its_weight_norm() -> None:
    # row 0: |w| 5, |g| 0.5 > 0.01*5 = 0.05 -> scale 0.1; row 1: |w| 0 -> floor 1e-3 -> bound 1e-5;
    # |g| 1e-6 stays; the bias: |w| 2, |g| 0.1 > 0.02 -> scale 0.2
    w = torch.nn.Parameter(T([[3.0, 4.0], [0.0, 0.0]]))
    w.grad = T([[0.3, 0.4], [1e-6, 0.0]])
    b = _param([1.0, 1.0, 1.0, 1.0], [0.1, 0.0, 0.0, 0.0])
    res = make_clipper("agc")([w, b])
    torch.testing.assert_close(w.grad, T([[0.03, 0.04], [1e-6, 0.0]]))
    torch.testing.assert_close(b.grad, T([0.02, 0.0, 0.0, 0.0]))
    post = math.sqrt(0.03**2 + 0.04**2 + 1e-12 + 0.02**2)
    assert float(res.post_norm) == pytest.approx(post, rel=1e-5)
    assert float(res.total_norm) == pytest.approx(math.sqrt(0.5**2 + 1e-12 + 0.01), rel=1e-5)


def test_agc_unit_norms_are_per_output_row_and_whole_vectors() -> None:
    torch.testing.assert_close(unit_norms(T([[3.0, 4.0], [6.0, 8.0]])), T([[5.0], [10.0]]))
    torch.testing.assert_close(unit_norms(T([3.0, 4.0])), T(5.0))
    torch.testing.assert_close(agc_scale(T([[5.0]]), T([[0.5]]), 0.01, 1e-3), T([[0.1]]))


# -- SPAM ---------------------------------------------------------------------------------------
def test_spam_clips_elements_to_sign_sqrt_theta_v() -> None:
    # theta 5000, v 1e-4 -> bound sqrt(0.5) = 0.70711; v 0 -> bound 0
    g = T([1.0, -0.5, 0.3, -2.0])
    spam_clip_(g, T([1e-4, 1e-4, 0.0, 1e-4]), 5000.0)
    torch.testing.assert_close(g, T([math.sqrt(0.5), -0.5, 0.0, -math.sqrt(0.5)]))


def _adam_run(p: torch.nn.Parameter, opt: torch.optim.Optimizer, clip, grads: list[float]):
    out = []
    for value in grads:
        p.grad = T([value, 0.1])
        res = clip([p])
        out.append((res, p.grad.clone()))
        opt.step()
    return out


def test_spam_resets_moments_on_schedule_and_clips_only_outside_its_warmup() -> None:
    p = torch.nn.Parameter(T([0.0, 0.0]))
    opt = torch.optim.Adam([p], lr=1e-3)
    clip = make_clipper(
        "spam", params=ClipParams(spam_theta=5000.0, spam_reset=4, spam_warmup=2), optimizer=opt
    )
    # updates 1..8: resets at 4 and 8; clipping where update % 4 >= 2 (updates 2, 3, 6, 7)
    # (update 1: 1 % 4 = 1 < 2, and Adam has no v yet anyway)
    out = _adam_run(p, opt, clip, [0.1, 0.1, 50.0, 50.0, 0.1, 0.1, 5000.0, 0.1])
    assert [r.moments_reset for r, _ in out] == [False, False, False, True] * 2
    # update 2: v = 0.001 * 0.1^2 = 1e-5, bound sqrt(5000 * 1e-5) = 0.224: 0.1 passes
    assert float(out[1][1][0]) == pytest.approx(0.1)
    # update 3: v = 0.999 * 1e-5 + 1e-5 = 1.999e-5, bound sqrt(5000 * v) = 0.316: 50 -> 0.316
    v_before_3 = (1 - 0.999) * 0.01 * (1 + 0.999)
    assert float(out[2][1][0]) == pytest.approx(math.sqrt(5000.0 * v_before_3), rel=1e-4)
    assert float(out[3][1][0]) == 50.0  # update 4: a reset update, inside the warm-up
    # update 7: the moments restarted at update 4 (whose 50 went into the fresh v):
    # v = 0.999^2 * 0.001 * 2500 + (0.999 + 1) * 0.001 * 0.01; 5000 is clipped to sqrt(5000 v)
    v_before_7 = 0.999**2 * 0.001 * 2500 + (0.999 + 1) * 0.001 * 0.01
    assert float(out[6][1][0]) == pytest.approx(math.sqrt(5000.0 * v_before_7), rel=1e-4)
    # after the reset at update 8 and its step, Adam's state holds one step's moments
    st = opt.state[p]
    assert float(st["step"]) == 1.0
    assert float(st["exp_avg"][0]) == pytest.approx(0.1 * 0.1)


def test_spam_zeroes_the_first_gradient_of_a_parameter_that_has_no_state_after_warmup() -> None:
    # The SPAM reference creates v = 0 for a new parameter before it clips, so every nonzero
    # element of its first gradient is clipped to sign(g) * sqrt(theta * 0) = 0.
    a = torch.nn.Parameter(T([1.0, -2.0]))
    late = torch.nn.Parameter(T([3.0, 0.0, -4.0]))
    opt = torch.optim.Adam([a, late], lr=1e-3)
    clip = make_clipper(
        "spam", params=ClipParams(spam_theta=5000.0, spam_reset=100, spam_warmup=1), optimizer=opt
    )
    for _ in range(3):  # only `a` has gradients: Adam has state for `a` alone
        a.grad = T([0.1, 0.1])
        clip([a, late])
        opt.step()
    assert late not in opt.state or "exp_avg_sq" not in opt.state[late]
    a.grad, late.grad = T([0.1, 0.1]), T([3.0, 0.0, -4.0])
    res = clip([a, late])
    assert late.grad.tolist() == [0.0, 0.0, 0.0]
    assert a.grad.tolist() == pytest.approx([0.1, 0.1])  # well inside its bound
    assert float(res.scale[1]) == 0.0 and float(res.scale[0]) == 1.0


def test_spam_without_an_optimizer_says_how_to_bind_one() -> None:
    p = _param([0.0], [1.0])
    with pytest.raises(ValueError, match="optimizer=opt"):
        make_clipper("spam")([p])


def test_spam_state_dict_keeps_the_reset_schedule() -> None:
    p = torch.nn.Parameter(T([0.0, 0.0]))
    opt = torch.optim.Adam([p], lr=1e-3)
    params = ClipParams(spam_reset=3, spam_warmup=1)
    a = make_clipper("spam", params=params, optimizer=opt)
    _adam_run(p, opt, a, [0.1, 0.1])
    b = make_clipper("spam", params=params, optimizer=opt)
    b.load_state_dict(a.state_dict())
    assert [r.moments_reset for r, _ in _adam_run(p, opt, b, [0.1, 0.1, 0.1, 0.1])] == [
        True, False, False, True,
    ]  # fmt: skip


# -- skip ---------------------------------------------------------------------------------------
def test_skip_decision_uses_the_windows_mean_and_sample_std() -> None:
    # window (1, 2, 3): mean 2, sample std 1; z 2 -> skip above 4
    window = T([1.0, 2.0, 3.0, math.nan, math.nan])
    assert bool(skip_decision(T(4.1), window, 2.0))
    assert not bool(skip_decision(T(3.9), window, 2.0))
    assert not bool(skip_decision(T(100.0), T([1.0, math.nan]), 2.0))  # one value: no std


def test_skip_decides_only_after_half_a_window_and_never_changes_the_gradient() -> None:
    p = _param([0.0, 0.0], [0.0, 0.0])
    clip = make_clipper("skip", params=ClipParams(skip_window=8, skip_z=3.0))
    decisions = []
    for n in (1.0, 2.0, 1.0, 50.0, 2.0, 1.0, 50.0, 2.0):
        _set_norm(p, n)
        res = clip([p])
        assert float(torch.linalg.vector_norm(p.grad)) == pytest.approx(n)  # untouched
        decisions.append(bool(res.skip))
    # updates 1-4 fill half the window (no decision: the 50 at update 4 passes). Update 7's 50
    # against (1, 2, 1, 50, 2, 1): mean 9.5, sample std 19.85, threshold 9.5 + 3 * 19.85 = 69:
    # not skipped. The window has seen a 50; only a norm far beyond it is skipped.
    assert decisions == [False] * 8
    _set_norm(p, 1000.0)
    assert bool(clip([p]).skip)


def test_step_unless_skips_a_fused_adamw_step_on_the_device() -> None:
    p = torch.nn.Parameter(T([1.0, 1.0]))
    opt = torch.optim.AdamW([p], lr=0.1, fused=True)
    p.grad = T([1.0, 1.0])
    step_unless(opt, torch.tensor(False))
    after_one = p.detach().clone()
    p.grad = T([5.0, 5.0])
    step_unless(opt, torch.tensor(True))
    torch.testing.assert_close(p.detach(), after_one)  # parameters unchanged
    assert float(opt.state[p]["step"]) == 1.0  # so is the step count
    assert not hasattr(opt, "found_inf")  # and the optimizer is left as it was


def test_step_unless_on_an_unfused_optimizer_still_skips() -> None:
    p = torch.nn.Parameter(T([1.0]))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = T([1.0])
    step_unless(opt, torch.tensor(True))
    assert float(p.detach()) == 1.0
    step_unless(opt, torch.tensor(False))
    assert float(p.detach()) == pytest.approx(0.9)


# -- every mode ---------------------------------------------------------------------------------
def test_every_adaptive_mode_is_registered_with_a_label_and_colour() -> None:
    for mode in ("zclip", "agc", "spam", "skip"):
        cls = CLIPPERS[mode]
        assert cls.label and cls.color.startswith("#")
    assert list(CLIPPERS)[:3] == ["none", "global", "per-tensor"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("zclip_alpha", 1.0), ("zclip_z", 0.0), ("agc_lambda", -1.0), ("spam_reset", 0),
     ("skip_window", 2), ("spam_warmup", 600)],
)  # fmt: skip
def test_clip_params_refuse_values_no_mode_can_run_with(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        ClipParams(**{field: value}).validate()


def test_a_moment_reset_ends_every_spike_term_and_empties_the_shadow_buffers() -> None:
    from andrea_diag.probes.shadow import GroupInfo, ShadowBuffers, SpikeTerm

    p = torch.nn.Parameter(T([1.0, 2.0]))
    opt = torch.optim.Adam([p])
    info = GroupInfo(opt.param_groups[0], opt)
    shadow = ShadowBuffers()
    shadow.add([p], [T([3.0, 4.0])], [0], [info], {id(p): 0})
    info.cm = 0.5  # some decay since the spike
    early, recovered = SpikeTerm(5, [1.0], [2.0]), SpikeTerm(8, [1.0], [2.0])
    recovered.recovery_m = recovered.recovery_v = 2
    shadow.clear([info], [early, recovered], update=12)
    assert not shadow and info.cm == 1.0 and info.bm_sq == 0.0
    assert early.am == [0.0] and early.av == [0.0]
    assert early.share_v_last == 0.0  # final_v_share reads this: the reset cleared the takeover
    assert (early.recovery_m, early.recovery_v) == (7, 7)  # recovered at the reset
    assert (recovered.recovery_m, recovered.recovery_v) == (2, 2)  # an earlier recovery stays


@pytest.mark.parametrize("mode", ["zclip", "spam", "skip"])
def test_a_resumed_trainer_continues_the_adaptive_modes_state(mode: str, tmp_path) -> None:
    """The clipper's state rides in the trainer's checkpoint: a trainer restored from update 6
    clips updates 7-10 exactly as the one that never stopped (short warm-ups, so every mode is
    past its warm-up by then and SPAM resets at 8)."""
    from andrea_diag.config import RunConfig
    from andrea_diag.data import BatchPlan, Mixer, prepare_data
    from andrea_diag.train.loop import Trainer

    # low thresholds: zclip and skip act on most updates after their warm-ups
    params = ClipParams(zclip_warmup=3, zclip_z=0.1, skip_window=6, skip_z=0.1, spam_reset=8,
                        spam_warmup=1)  # fmt: skip
    cfg = RunConfig(size="tiny", steps=10, clip=mode, device="cpu", clip_params=params,
                    checkpoint_every=0, eval_every=0).resolve()  # fmt: skip
    data = prepare_data(cfg.sources, seed=cfg.corpus_seed)

    def trainer(name: str, resume: bool = False) -> Trainer:
        plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=cfg.micro_batch,
                         accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
        return Trainer(cfg, tmp_path / name, data, plan, resume=resume)

    straight = trainer("straight")
    rows = [straight.train_update(u) for u in range(1, 11)]
    first = trainer("first")
    for u in range(1, 7):
        first.train_update(u)
    path = first.checkpointer.save(first.checkpoint_state(), 6)
    # the stopped run's own directory, as --resume finds it (its rows up to the checkpoint)
    shutil.copytree(
        tmp_path / "first", tmp_path / "resumed", ignore=shutil.ignore_patterns("*.lock")
    )
    resumed = trainer("resumed", resume=True)
    resumed.restore(path)
    for u in range(7, 11):
        row = resumed.train_update(u)
        for key in ("grad_norm", "grad_norm_post", "skipped", "loss"):
            assert row[key] == rows[u - 1][key], (mode, u, key)
    # and the mode's own state ends where the uninterrupted one's does (ZClip's EMA, SPAM's
    # update count, skip's window)
    for key, value in straight.clipper.state_dict().items():
        got = resumed.clipper.state_dict()[key]
        assert torch.equal(got, value) if torch.is_tensor(value) else got == value, (mode, key)


def test_a_mode_that_clips_nothing_reports_a_scale_of_exactly_one() -> None:
    """AGC and SPAM re-sum their post-clip norms; a tensor they left alone must not come out a
    rounding step below its pre-clip norm (it would count as a clipped update)."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in [(37, 19), (19,), (8, 3)]]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-2
    agc = make_clipper("agc", params=ClipParams(agc_lambda=1e9))([*params])
    assert torch.equal(agc.scale, torch.ones_like(agc.scale))
    opt = torch.optim.Adam(params)
    opt.step()  # v exists
    spam = make_clipper("spam", params=ClipParams(spam_theta=1e30, spam_warmup=0), optimizer=opt)
    res = spam(params)
    assert torch.equal(res.scale, torch.ones_like(res.scale))
    assert float(res.post_norm) == float(res.total_norm)


def test_skip_always_skips_a_non_finite_norm() -> None:
    window = T([1.0, 2.0, 3.0, math.nan])
    assert bool(skip_decision(T(math.nan), window, 2.0))
    assert bool(skip_decision(T(math.inf), window, 2.0))
    assert bool(skip_decision(T(math.inf), T([math.nan, math.nan]), 2.0))  # even with no window
