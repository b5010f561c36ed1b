"""``SpikeMonitor``'s per-update calls check what they are given, at the call, before anything
is written (review of bad input, round 26; ``andrea_diag/monitor_checks.py``).

Before:

- ``add_columns`` wrote any name into the row, the monitor's own too: ``add_columns(update=7,
  loss=123.0)`` on update 2 of 3 wrote updates 1, 7, 3 and a loss of 123.0, and ``load_run``
  and the report took the scrambled run; ``add_columns(update="abc")`` was taken and
  ``load_run`` failed later. A value no table cell holds (a list, a numpy array of 3) was taken
  too: written as a gap, or failing at the recorder's flush with the rows waiting beside it.
- ``log_framework`` did not check its arguments: ``update="abc"`` was a bare ``ValueError:
  invalid literal for int()``, ``update=1.7`` was written as update 1 and ``-5`` as -5, and
  ``values=None`` (or a list) an ``AttributeError`` inside ``framework_row``.
- ``after_step(applied="no")`` was an applied update to the probes (a truthy string) and a
  skipped one in ``metrics.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run

VOCAB = 10
# written by the monitor, but a loop's to correct (integrations/capture.py does)
CORRECTIONS = {"microbatches": 4, "grad_norm_post": 0.5, "clip_coef": 0.5}


def _monitor(
    tmp_path: Path, **options: object
) -> tuple[SpikeMonitor, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return SpikeMonitor(model, opt, tmp_path / "run", **options), model, opt


def _clipped(mon: SpikeMonitor, model: torch.nn.Module, phase: int | None = None) -> None:
    """One update up to ``after_clip``, with per-example losses, a phase and a clip's total:
    every column the monitor writes in a row."""
    per_example = model(torch.randint(0, VOCAB, (4, 5))).logsumexp(-1).mean(-1)
    loss = per_example.mean()
    loss.backward()
    mon.after_backward(loss, per_example_loss=per_example.detach(), phase=phase)
    mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1))


def _step(mon: SpikeMonitor, opt: torch.optim.Optimizer, **kw: object) -> None:
    opt.step()
    mon.after_step(**kw)
    opt.zero_grad()


def test_add_columns_refuses_the_monitors_own_update_and_loss_and_the_run_stays_in_order(
    tmp_path: Path,
) -> None:
    mon, model, opt = _monitor(tmp_path)
    for u in (1, 2, 3):
        _clipped(mon, model)
        if u == 2:
            with pytest.raises(ValueError) as err:
                mon.add_columns(update=7, loss=123.0, mine=1.0)
            said = str(err.value)
            assert said.startswith("SpikeMonitor.add_columns: ") and "'update', 'loss'" in said
            assert "choose another name" in said and "'mine'" not in said, said
            mon.add_columns(**{"my/update": 7})  # the same value under a name of the user's
        _step(mon, opt)
    mon.close()
    df = load_run(mon.run_dir)["metrics"]
    assert df["update"].tolist() == [1, 2, 3]
    assert 123.0 not in df["loss"].tolist() and "mine" not in df  # nothing of the refused call
    assert df["my/update"].tolist()[1] == 7


def test_add_columns_refuses_a_text_update_at_the_call_not_at_load_run(tmp_path: Path) -> None:
    mon, model, opt = _monitor(tmp_path)
    _clipped(mon, model)
    with pytest.raises(ValueError, match=r"'update' is the monitor's own column"):
        mon.add_columns(update="abc")
    _step(mon, opt)
    mon.close()
    assert load_run(mon.run_dir)["metrics"]["update"].tolist() == [1]


def test_add_columns_refuses_every_column_the_monitor_and_its_probes_write_but_corrections(
    tmp_path: Path,
) -> None:
    """The refused names are the ones a real row holds (clip, phase, per-example losses, the
    probes of an Adam run): a column the monitor starts writing is refused or a correction."""
    mon, model, opt = _monitor(tmp_path / "a", spike_window=4)
    for _ in range(12):
        _clipped(mon, model, phase=0)
        _step(mon, opt)
    mon.close()
    written = set(load_run(mon.run_dir)["metrics"].columns)
    assert {"update", "loss", "grad_norm", "lr", "applied", "phase", "unix_time_s"} <= written
    assert {"loss_z", "m_norm", "update_rms", "layer_gn/h00.embedding"} <= written
    assert set(CORRECTIONS) <= written
    # probe columns this short run does not reach, named by the schema's owners
    others = {"lockin/top_token_share", "layer_v/h01.mlp", "spike", "v_spike_share"}
    mon, model, opt = _monitor(tmp_path / "b")
    _clipped(mon, model, phase=0)
    for name in sorted(written - set(CORRECTIONS) | others):
        with pytest.raises(ValueError, match="choose another name"):
            mon.add_columns(**{name: 1.0})
    mon.add_columns(**CORRECTIONS, tokens=40, loss_aux=2.0, eval_loss=3.0, **{"data.src": "wiki"})
    _step(mon, opt)
    mon.close()
    row = load_run(mon.run_dir)["metrics"].iloc[0]
    assert row["update"] == 1 and row["microbatches"] == 4 and row["clip_coef"] == 0.5
    assert row["tokens"] == 40 and row["loss_aux"] == 2.0 and row["data.src"] == "wiki"


@pytest.mark.parametrize(
    "value",
    [[1, 2], {"a": 1}, np.ones(3), torch.ones(3), object(), 1j],
    ids=["list", "dict", "numpy-array-of-3", "tensor-of-3", "object", "complex"],
)
def test_add_columns_refuses_a_value_no_table_cell_holds(tmp_path: Path, value: object) -> None:
    mon, model, opt = _monitor(tmp_path)
    _clipped(mon, model)
    with pytest.raises(TypeError, match=r"add_columns: column 'mine' must be a number, a bool"):
        mon.add_columns(mine=value)
    mon.add_columns(mine=torch.tensor(1.5), flag=np.bool_(True), n=np.int64(3), note=None)
    _step(mon, opt)  # a numpy array of 3 failed here, at the flush, before
    mon.close()
    assert load_run(mon.run_dir)["metrics"]["mine"].tolist() == [1.5]


@pytest.mark.parametrize("name", ["tokens", "eval_loss", "loss_aux", "w_aux"])
def test_add_columns_refuses_text_in_a_number_column_of_the_schema(
    tmp_path: Path, name: str
) -> None:
    """A text ``eval_loss`` failed the lock-in probe at close; a text ``tokens`` read as gaps."""
    mon, model, _ = _monitor(tmp_path)
    _clipped(mon, model)
    with pytest.raises(TypeError, match=rf"column '{name}' holds a number in the schema"):
        mon.add_columns(**{name: "abc"})
    mon.close()


@pytest.mark.parametrize(
    "update, error, said",
    [
        ("abc", TypeError, "update must be an int, got str 'abc'"),
        (1.7, TypeError, "update must be an int, got float 1.7"),
        (True, TypeError, "update must be an int, got bool"),
        (torch.tensor(3), TypeError, "update must be an int, got Tensor"),
        (-5, ValueError, "update must be a whole number of at least 0, got -5"),
        (10**12, ValueError, "update must be at most"),
    ],
    ids=["text", "fraction", "bool", "tensor", "negative", "past-the-update-cap"],
)
def test_log_framework_refuses_an_update_that_is_no_update_number_before_writing(
    tmp_path: Path, update: object, error: type, said: str
) -> None:
    mon, _, _ = _monitor(tmp_path)
    with pytest.raises(error) as err:
        mon.log_framework({"loss": 1.5}, update=update)
    assert str(err.value).startswith("SpikeMonitor.log_framework: ") and said in str(err.value)
    assert not (mon.run_dir / "framework.jsonl").exists()  # nothing written
    mon.log_framework({"loss": 1.5}, update=np.int64(0))  # 0: an evaluation before training
    mon.close()
    assert (mon.run_dir / "framework.jsonl").read_text() == '{"update":0,"loss":1.5}\n'


@pytest.mark.parametrize("values", [None, [("loss", 1.0)], "loss", 1.5], ids=repr)
def test_log_framework_refuses_values_that_are_not_a_mapping(tmp_path: Path, values: object):
    mon, _, _ = _monitor(tmp_path)
    with pytest.raises(TypeError, match=r"^SpikeMonitor.log_framework: values must be a dict"):
        mon.log_framework(values, update=1)
    mon.close()
    assert not (mon.run_dir / "framework.jsonl").exists()


def test_log_framework_refuses_bad_arguments_after_close_too(tmp_path: Path) -> None:
    """After close a good call is ignored (an ``evaluate()`` after ``train()``); a wrong one is
    the caller's mistake whenever it comes, and was silently dropped."""
    mon, _, _ = _monitor(tmp_path)
    mon.close()
    mon.log_framework({"eval_loss": 1.0}, update=3)  # ignored, as before
    with pytest.raises(TypeError, match="values must be a dict"):
        mon.log_framework(None)
    with pytest.raises(ValueError, match="at least 0, got -5"):
        mon.log_framework({"eval_loss": 1.0}, update=-5)


@pytest.mark.parametrize("applied", ["no", 0, [], torch.tensor([True, False])], ids=repr)
def test_after_step_refuses_an_applied_that_is_not_a_bool_before_counting_the_update(
    tmp_path: Path, applied: object
) -> None:
    mon, model, opt = _monitor(tmp_path)
    _clipped(mon, model)
    opt.step()
    with pytest.raises(TypeError, match=r"^SpikeMonitor.after_step: applied must be a bool"):
        mon.after_step(applied=applied)
    mon.after_step(applied=torch.tensor(False))  # a one-element bool tensor is a flag
    mon.close()
    df = load_run(mon.run_dir)["metrics"]
    assert df["update"].tolist() == [1] and df["applied"].tolist() == [False]


@pytest.mark.parametrize("norm_type", ["abc", True], ids=["str", "bool"])
def test_after_clip_refuses_a_norm_type_that_is_no_number_in_one_line(
    tmp_path: Path, norm_type: object
) -> None:
    """Before: "abc" raised float()'s "could not convert string to float", True was read as
    the 1-norm. (None, float()'s TypeError then, is the default since round 28: the clip's
    own p, tests/test_parity_s28_clip.py.)"""
    mon, model, _ = _monitor(tmp_path)
    loss = model(torch.randint(0, VOCAB, (4, 5))).logsumexp(-1).mean()
    loss.backward()
    mon.after_backward(loss)
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with pytest.raises(TypeError, match=r"^norm_type must be a number, got"):
        mon.after_clip(total, norm_type=norm_type)


@pytest.mark.parametrize("given", ["none", "clip_result"])
@pytest.mark.parametrize("norm_type", ["abc", float("nan"), -1.0], ids=["str", "nan", "negative"])
def test_after_clip_refuses_a_bad_norm_type_also_where_it_is_unused(
    tmp_path: Path, given: str, norm_type: object
) -> None:
    """Before: with no total (None) or with the toolkit's own ClipResult, ``norm_type`` was never
    read, so a wrong one passed silently; the update must not be counted either."""
    from andrea_diag.clip.api import clip_grad_norm_with_stats

    mon, model, _ = _monitor(tmp_path)
    loss = model(torch.randint(0, VOCAB, (4, 5))).logsumexp(-1).mean()
    loss.backward()
    mon.after_backward(loss)
    value = None if given == "none" else clip_grad_norm_with_stats(list(model.parameters()), 0.1)
    error = TypeError if isinstance(norm_type, str) else ValueError
    with pytest.raises(error, match=r"^norm_type must be"):
        mon.after_clip(value, norm_type=norm_type)
    assert mon.update == 0


def test_add_columns_refuses_a_probes_column_also_when_that_probe_is_off_and_says_so(
    tmp_path: Path,
) -> None:
    """Before, the message said a probe's column was refused "when on" while it was refused
    always: a column keeps one meaning across runs, so the rule stands and the words now match."""
    from andrea_diag.probe_config import ProbeConfig

    mon, model, opt = _monitor(tmp_path, probes=ProbeConfig(update_stats=False))
    _clipped(mon, model)
    with pytest.raises(
        ValueError, match=r"'update_rms' \(probe .*stays its own when the probe is off"
    ):
        mon.add_columns(update_rms=1.0)
    _step(mon, opt)
    mon.close()
    assert "update_rms" not in load_run(mon.run_dir)["metrics"]
