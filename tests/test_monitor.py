"""SpikeMonitor: the README snippet runs as written, and the monitor records what the loop would."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from monitor_helpers import monitored_update

from andrea_diag.config import MODEL_PRESETS
from andrea_diag.model import GPT
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run

README = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"  # the snippet's home


def _snippet() -> str:
    text = README.read_text()
    after = text[text.index("<!-- monitor-snippet -->") :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_readme_snippet_runs_and_writes_a_report_ready_run_dir():
    ns: dict = {}
    exec(compile(_snippet(), "docs/integrations.md:monitor-snippet", "exec"), ns)
    run = load_run(ns["run_dir"])
    assert run["config"]["kind"] == "monitor"
    df = run["metrics"]
    assert len(df) >= 3
    for col in ("update", "loss", "grad_norm", "layer_gn/h00.attention", "m_norm", "update_rms"):
        assert col in df.columns, col
    assert df["update"].tolist() == list(range(1, len(df) + 1))
    assert {"spikes", "pollution", "lockin"} <= set(run["summary"])


def _loop(tmp_path, n=20, bad_at=None, clip="torch"):
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pre_norms = []
    with SpikeMonitor(model, opt, tmp_path / "run", spike_window=10) as mon:
        for u in range(1, n + 1):
            x = torch.randint(0, 8449, (4, 17))
            per_ex = F.cross_entropy(
                model(x[:, :-1]).transpose(1, 2), x[:, 1:], reduction="none"
            ).mean(1)
            loss = per_ex.mean() * (math.inf if u == bad_at else 1.0)
            loss.backward()
            pre_norms.append({n_: p.grad.norm().item() for n_, p in model.named_parameters()})
            mon.after_backward(loss, per_example_loss=per_ex)
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5) if clip else None
            skip = u == bad_at
            mon.after_clip(total)
            if not skip:
                opt.step()
            mon.after_step(applied=not skip)
            opt.zero_grad()
    return mon, pre_norms


def test_monitor_records_a_nonfinite_update_as_a_numerical_spike(tmp_path):
    mon, _ = _loop(tmp_path, bad_at=15)
    events = [json.loads(x) for x in (mon.run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["update"] for e in events} == {15}
    assert all("numerical" in e["causes"] for e in events)
    assert mon.summary["spikes"]["by_cause"]["numerical"] >= 1


def test_monitor_undoes_torch_clipping_for_pre_clip_layer_norms(tmp_path):
    mon, pre = _loop(tmp_path, n=3)
    df = load_run(mon.run_dir)["metrics"]
    want = math.sqrt(sum(v * v for k, v in pre[-1].items() if k.startswith("h.0.attn")))
    assert df["layer_gn/h00.attention"].iloc[-1] == pytest.approx(want, rel=1e-4)
    assert df["grad_norm"].iloc[-1] == pytest.approx(
        math.sqrt(sum(v * v for v in pre[-1].values())), rel=1e-4
    )


def test_monitor_closes_once_and_rejects_out_of_order_calls(tmp_path):
    model = GPT(MODEL_PRESETS["tiny"])
    mon = SpikeMonitor(model, torch.optim.Adam(model.parameters()), tmp_path / "run")
    with pytest.raises(RuntimeError):
        mon.after_clip(None)
    assert mon.close() is mon.close()


def test_a_loop_that_raises_inside_the_monitor_is_recorded_as_crashed(tmp_path):
    import json

    import pytest
    import torch

    from andrea_diag.config import MODEL_PRESETS
    from andrea_diag.model import GPT
    from andrea_diag.monitor import SpikeMonitor

    model = GPT(MODEL_PRESETS["tiny"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with (
        pytest.raises(RuntimeError, match="user bug"),
        SpikeMonitor(model, opt, tmp_path / "r") as mon,
    ):
        for i in range(3):
            x = torch.randint(0, 8449, (2, 9))
            loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).transpose(1, 2), x[:, 1:])
            monitored_update(mon, opt, loss)
            if i == 1:
                raise RuntimeError("user bug")
    assert not (tmp_path / "r" / "summary.json").exists()
    partial = json.loads((tmp_path / "r" / "partial_summary.json").read_text())
    assert partial["status"] == "crashed" and partial["n_updates"] == 2


def test_framework_values_logged_after_close_are_ignored_not_a_crash(tmp_path):
    """HF's evaluate() after train() logs once more after on_train_end closed the monitor."""
    import torch

    from andrea_diag.monitor import SpikeMonitor

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = SpikeMonitor(model, opt, tmp_path / "run")
    for _ in range(2):
        loss = model(torch.randn(8, 4)).square().mean()
        monitored_update(mon, opt, loss)
        mon.log_framework({"loss": float(loss)})
    mon.close()
    before = (tmp_path / "run" / "framework.jsonl").read_text()
    mon.log_framework({"eval_loss": 1.0})  # after close
    assert (tmp_path / "run" / "framework.jsonl").read_text() == before
    assert len(before.splitlines()) == 2
