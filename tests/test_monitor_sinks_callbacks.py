"""SpikeMonitor's sinks and the framework callbacks' options, after review (s22): every sink is
given its events and closed even when one fails or the recorder's own close fails, a damaged
side file in the run does not stop them, and a callback's options are checked when it is made.
"""

from __future__ import annotations

import json

import pytest
import torch

from andrea_diag.integrations.callback import MonitorCallback
from andrea_diag.monitor import SpikeMonitor

VOCAB = 11


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))


class _ClosedSink:
    """A metric sink that says whether it was closed; ``fail`` makes its events() raise,
    ``fail_close`` its close()."""

    def __init__(self, fail: bool = False, fail_close: bool = False) -> None:
        self.fail, self.fail_close, self.closed, self.got_events = fail, fail_close, False, None

    def log(self, row):
        pass

    def events(self, events):
        if self.fail:
            raise RuntimeError("the service refused the table")
        self.got_events = events

    def summary(self, summary):
        pass

    def close(self):
        self.closed = True
        if self.fail_close:
            raise ConnectionError("the service went away")


def _monitored_with(tmp_path, sinks):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mon = SpikeMonitor(model, opt, tmp_path / "run", lockin=False, loggers=sinks)
    model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean().backward()
    mon.after_backward(1.0)
    mon.after_clip(None)
    mon.after_step()
    return mon


def test_a_damaged_side_file_in_the_run_does_not_stop_the_sinks_getting_their_events(tmp_path):
    """close() read the whole run back (load_run) for its events: a damaged data.json in the
    folder raised there, after summary.json, and no sink was given events or closed."""
    sink = _ClosedSink()
    mon = _monitored_with(tmp_path, [sink])
    (mon.run_dir / "data.json").write_bytes(b"\xff{not json")
    mon.close()
    assert sink.closed and sink.got_events is not None


def test_every_sink_is_closed_when_one_fails_at_close(tmp_path):
    first, second = _ClosedSink(fail=True), _ClosedSink()
    mon = _monitored_with(tmp_path, [first, second])
    with pytest.raises(RuntimeError, match="refused the table"):
        mon.close()
    assert first.closed and second.closed
    assert (mon.run_dir / "summary.json").is_file()
    assert mon.close() == mon.summary  # recorded once: a second close() writes nothing again


@pytest.mark.parametrize(
    "options, error, said",
    [
        ({"spike_zz": 3.0}, TypeError, "spike_zz"),
        ({"seed": -1}, ValueError, "seed must be a whole number"),
        ({"total_steps": 5}, TypeError, "taken from the trainer's max_steps"),
        ({"loggers": 3}, TypeError, "loggers must be a list"),
        ({"meta": [1]}, TypeError, "meta must be a dict"),
    ],
    ids=["misspelt-probe-option", "negative-seed", "total-steps", "loggers", "meta"],
)
def test_a_callbacks_bad_option_is_refused_when_it_is_made(tmp_path, options, error, said):
    """They were checked at the framework's first event, inside trainer.fit, after the user's
    setup; total_steps there was Python's 'got multiple values for keyword argument'."""
    with pytest.raises(error, match=said):
        MonitorCallback(tmp_path / "run", **options)
    assert not (tmp_path / "run").exists()


def test_a_callbacks_meta_is_kept_beside_the_frameworks_own(tmp_path):
    """meta= given to a callback met the callback's own meta= at the start of training:
    'got multiple values for keyword argument'."""
    callback = MonitorCallback(tmp_path / "run", meta={"team": "a"}, lockin=False)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    callback._start(model, opt, total_steps=3, framework=("hf", "9.9", {}), settings={})
    config = json.loads((callback.monitor.run_dir / "config.json").read_text())
    assert config["team"] == "a" and config["steps"] == 3
    callback._close_monitor()


def test_every_sink_is_closed_when_one_fails_to_close_or_the_recorder_fails(tmp_path, monkeypatch):
    """The first close() that raised left the sinks after it open, and a recorder whose own
    close() failed (a full disk at the parquet) closed none."""
    first, second = _ClosedSink(fail_close=True), _ClosedSink()
    mon = _monitored_with(tmp_path, [first, second])
    with pytest.raises(ConnectionError):
        mon.close()
    assert first.closed and second.closed and second.got_events is not None
    sink = _ClosedSink()
    mon = _monitored_with(tmp_path / "b", [sink])

    def full_disk(summary=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mon.recorder, "close", full_disk)
    with pytest.raises(OSError, match="No space"):
        mon.close()
    assert sink.closed
