"""SpikeMonitor in a user's loop: the traps a practitioner met (issue 24 item 5) stay closed.

- ``after_backward`` once per microbatch accumulates (the update's loss is their mean), never
  overwrites;
- passing ``clip_grad_norm_``'s return value (the total norm only) still records ``clip_coef``
  and ``grad_norm_post``;
- a non-finite update is flagged ``nonfinite`` but counted as applied unless the loop says it
  skipped the step (plain SGD applies it).
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _run(tmp_path, body) -> dict:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with SpikeMonitor(model, opt, tmp_path / "run", shadow=False) as mon:
        body(model, opt, mon)
    return load_run(tmp_path / "run")


def test_after_backward_per_microbatch_records_the_mean_not_the_last(tmp_path):
    def body(model, opt, mon):
        x = torch.randn(6, 4)
        for true_loss in (1.0, 10.0, 5.5):  # three microbatches of one update
            out = model(x).mean() * 0 + true_loss  # a loss of known value, with a graph
            out.backward()
            mon.after_backward(out)
        mon.after_clip(None)
        opt.step()
        mon.after_step()
        opt.zero_grad()

    m = _run(tmp_path, body)["metrics"]
    assert m["loss"].tolist() == pytest.approx([(1.0 + 10.0 + 5.5) / 3])
    assert m["microbatches"].tolist() == [3]


def test_a_total_norm_from_torch_clip_still_records_clip_coef(tmp_path):
    def body(model, opt, mon):
        for _ in range(2):
            loss = (model(torch.randn(8, 4)) * 50).square().mean()  # large: clipped at 0.1
            loss.backward()
            mon.after_backward(loss)
            mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1))
            opt.step()
            mon.after_step()
            opt.zero_grad()

    m = _run(tmp_path, body)["metrics"]
    assert m["clip_coef"].notna().all() and (m["clip_coef"] < 1).all()
    assert m["grad_norm_post"].tolist() == pytest.approx([0.1, 0.1], rel=1e-4)
    assert (m["clip_coef"] * m["grad_norm"]).tolist() == pytest.approx([0.1, 0.1], rel=1e-4)


def test_a_nonfinite_update_is_flagged_and_counted_applied_unless_the_loop_skipped_it(tmp_path):
    def body(model, opt, mon):
        for skip in (False, True):
            loss = model(torch.full((2, 4), float("nan"))).mean()
            loss.backward()
            mon.after_backward(loss)
            mon.after_clip(None)
            if not skip:
                opt.step()  # SGD applies the NaN gradient
            mon.after_step(applied=False if skip else None)
            opt.zero_grad()

    m = _run(tmp_path, body)["metrics"]
    assert m["nonfinite"].tolist() == [True, True]
    assert m["applied"].tolist() == [True, False]


def test_a_second_run_into_the_same_folder_gets_a_versioned_directory(tmp_path):
    def one_update(model, opt, mon):
        loss = model(torch.randn(2, 4)).mean()
        loss.backward()
        mon.after_backward(loss)
        mon.after_step()
        opt.zero_grad()

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dirs = []
    for _ in range(3):
        with SpikeMonitor(model, opt, tmp_path / "run", shadow=False) as mon:
            one_update(model, opt, mon)
        dirs.append(mon.run_dir)
    assert [d.name for d in dirs] == ["run", "run-2", "run-3"]
    assert all(len(load_run(d)["metrics"]) == 1 for d in dirs)  # none overwritten
