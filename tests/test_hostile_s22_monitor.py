"""``SpikeMonitor`` inside the user's loop, fed hostile or damaged input. Pinned here:

- the next ``out_dir-N``: a name taken by a file or a planted link is skipped (never a raw
  ``pathlib`` error, never a run written through a link); ``.`` is numbered after its folder;
- ``resume=True``: the folder is read back as untrusted input before anything is written (a
  foreign or damaged ``config.json``, a planted 40 GB or non-regular table, a parquet table
  with rows the JSONL lacks are one ``ValueError`` each, and nothing is cut or overwritten);
  update numbers count on, and the earlier segment's summary is kept, not read as this run's;
- the hooks' arguments (loss, per-example losses, sources, phase, weights, total norm): one
  clear ``TypeError``/``ValueError`` naming the argument, not ``float()``'s or torch's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from monitor_helpers import monitored_update

from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run

VOCAB = 10


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))


def _run(out_dir: Path | str, updates: int = 2, **options) -> SpikeMonitor:
    """A monitored run of ``updates`` updates, closed; the monitor (its ``run_dir``)."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with SpikeMonitor(model, opt, out_dir, lockin=False, **options) as mon:
        for _ in range(updates):
            monitored_update(mon, opt, model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean())
    return mon


# -- the next free out_dir-N -----------------------------------------------------------------


def test_a_file_named_like_the_next_version_is_skipped_not_a_not_a_directory_error(tmp_path):
    _run(tmp_path / "run")
    (tmp_path / "run-2").write_text("someone's notes")
    mon = _run(tmp_path / "run")
    assert mon.run_dir == tmp_path / "run-3"
    assert (tmp_path / "run-2").read_text() == "someone's notes"


def test_a_dangling_link_named_like_the_next_version_is_skipped_not_a_file_exists_error(
    tmp_path,
):
    _run(tmp_path / "run")
    (tmp_path / "run-2").symlink_to(tmp_path / "nowhere")
    mon = _run(tmp_path / "run")
    assert mon.run_dir == tmp_path / "run-3"
    assert not (tmp_path / "nowhere").exists()  # nothing made through the link


def test_a_link_to_an_empty_folder_elsewhere_is_never_written_through(tmp_path):
    _run(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run-2").symlink_to(elsewhere)
    mon = _run(tmp_path / "run")
    assert mon.run_dir == tmp_path / "run-3"
    assert list(elsewhere.iterdir()) == []


def test_out_dir_dot_that_holds_a_run_gets_a_sibling_named_after_the_folder(tmp_path, monkeypatch):
    here = tmp_path / "work"
    _run(here)
    monkeypatch.chdir(here)
    mon = _run(".")
    assert Path(mon.run_dir).resolve() == tmp_path / "work-2"
    assert len(load_run(tmp_path / "work")["metrics"]) == 2  # the first run untouched


def test_the_filesystem_root_as_out_dir_is_one_clear_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"SpikeMonitor: out_dir '/' .*name a folder"):
        _run("/")


def test_a_relative_out_dir_stays_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run("mine")
    assert _run("mine").run_dir == Path("mine-2")
    assert os.path.isdir(tmp_path / "mine-2")


# -- resume=True: the folder is read back, as untrusted input, before anything is written -----


def _updates(run_dir: Path) -> list[int]:
    return load_run(run_dir)["metrics"]["update"].tolist()


def test_a_resumed_monitor_counts_on_from_the_last_recorded_update(tmp_path):
    _run(tmp_path / "run", updates=3)
    _run(tmp_path / "run", updates=2, resume=True)
    assert _updates(tmp_path / "run") == [1, 2, 3, 4, 5]  # was [1, 2, 3, 1, 2]


def test_a_resumed_run_killed_before_close_shows_every_row_not_the_stale_parquet(tmp_path):
    _run(tmp_path / "run", updates=3)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mon = SpikeMonitor(model, opt, tmp_path / "run", lockin=False, resume=True)
    monitored_update(mon, opt, model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean())
    mon.recorder.flush()  # then killed: no close
    try:
        assert _updates(tmp_path / "run") == [1, 2, 3, 4]  # the old parquet said [1, 2, 3]
        assert not (tmp_path / "run" / "summary.json").exists()  # not read as finished
        kept = tmp_path / "run" / "summary_to_update_3.json"
        assert '"n_updates": 3' in kept.read_text()  # the earlier segment's summary kept
    finally:
        mon.recorder.release()


def test_resume_into_a_training_run_is_refused_and_its_config_is_not_overwritten(tmp_path):
    run = tmp_path / "train-run"
    run.mkdir()
    (run / "config.json").write_text('{"kind": "train", "arm": "clip", "seed": 3}')
    with pytest.raises(ValueError, match="not a SpikeMonitor run"):
        _run(run, resume=True)
    assert (run / "config.json").read_text() == '{"kind": "train", "arm": "clip", "seed": 3}'
    assert sorted(p.name for p in run.iterdir()) == ["config.json"]


@pytest.mark.parametrize(
    "content, said",
    [
        (b"[1, 2]", "holds a list, not a dict"),
        (b'{"kind": "moni', "is not valid JSON"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b'{"kind": NaN}', "not a SpikeMonitor run"),
        (b'{"kind": ' + b"9" * 5000 + b"}", "is not a run's JSON"),
    ],
)
def test_resume_with_a_damaged_config_is_one_value_error_and_writes_nothing(
    tmp_path, content, said
):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_bytes(content)
    (run / "metrics.jsonl").write_text('{"update": 1, "loss": 2.0}\n')
    with pytest.raises(ValueError, match=rf"SpikeMonitor: cannot resume .*{said}"):
        _run(run, resume=True)
    assert (run / "config.json").read_bytes() == content
    assert (run / "metrics.jsonl").read_text() == '{"update": 1, "loss": 2.0}\n'


def test_resume_into_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"config.json is missing"):
        _run(tmp_path, resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("table", ["metrics.jsonl", "events.jsonl", "framework.jsonl"])
def test_a_planted_huge_table_is_refused_by_size_at_resume_not_after_the_run(tmp_path, table):
    run = _run(tmp_path / "run").run_dir
    with open(run / table, "ab") as f:  # sparse: costs nothing, reads as 40 GB
        f.truncate(40 << 30)
    with pytest.raises(ValueError, match=rf"{table} .* is 40.0 GiB, more than this reader"):
        _run(run, resume=True)
    assert (run / table).stat().st_size == 40 << 30  # not cut back by a torn-tail repair


@pytest.mark.parametrize("kind", ["fifo", "dir", "link-out"])
def test_a_table_that_is_not_a_regular_file_of_the_run_is_refused_at_resume(tmp_path, kind):
    run = _run(tmp_path / "run").run_dir
    target = run / "framework.jsonl"  # first opened mid-training, at the framework's first log
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dir":
        target.mkdir()
    else:
        (tmp_path / "outside.jsonl").write_text('{"update": 1}\n')
        target.symlink_to(tmp_path / "outside.jsonl")
    with pytest.raises(ValueError, match=r"SpikeMonitor: cannot resume .*framework.jsonl"):
        _run(run, resume=True)


def test_a_metrics_jsonl_cut_short_with_the_parquet_intact_is_refused_not_wiped(tmp_path):
    run = _run(tmp_path / "run", updates=3).run_dir
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text(lines[0])  # a damaged copy: one row of three left
    with pytest.raises(ValueError, match=r"metrics.parquet holds 3 rows but metrics.jsonl only 1"):
        _run(run, resume=True)
    assert len(load_run(run)["metrics"]) == 3  # the parquet still has every row


@pytest.mark.parametrize(
    "last_row",
    [
        b"[1, 2, 3]\n",
        b'{"update": 4, "loss": 1.0',  # torn by a crash
        b"\xff\xfe\xfd\n",
    ],
)
def test_a_damaged_last_metrics_row_does_not_break_the_count_or_lose_the_others(tmp_path, last_row):
    run = _run(tmp_path / "run", updates=2).run_dir
    (run / "metrics.parquet").unlink()  # killed before close: only the JSONL table
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(last_row)
    _run(run, updates=1, resume=True)
    assert _updates(run) == [1, 2, 3]


@pytest.mark.parametrize("update", [b"1e400", b"null", b"-Infinity"])
def test_a_row_without_a_valid_update_number_is_one_value_error_and_nothing_is_cut(
    tmp_path, update
):
    run = _run(tmp_path / "run", updates=2).run_dir
    (run / "metrics.parquet").unlink()
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'{"update": ' + update + b', "loss": 1.0}\n')
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"SpikeMonitor: cannot resume .*no valid update number"):
        _run(run, resume=True)
    assert (run / "metrics.jsonl").read_bytes() == before


def test_a_recorded_update_past_any_run_is_refused_at_resume(tmp_path):
    run = _run(tmp_path / "run", updates=1).run_dir
    (run / "metrics.parquet").unlink()
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"update": 4000000000000000, "loss": 1.0}\n')
    with pytest.raises(
        ValueError, match=r"records update 4000000000000000, outside any run's 0 to"
    ):
        _run(run, resume=True)


# -- the hooks' own arguments: one clear TypeError/ValueError, not float()'s or torch's ----------


def _one_backward(tmp_path: Path) -> tuple[SpikeMonitor, torch.Tensor]:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mon = SpikeMonitor(model, opt, tmp_path / "run", lockin=False)
    loss = model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean(-1)  # (2,)
    loss.mean().backward()
    return mon, loss.detach()


@pytest.mark.parametrize(
    "loss, error, said",
    [
        pytest.param(
            10**400, ValueError, "loss is an int of 1329 bits, past a float", id="int-past-float"
        ),
        ("abc", TypeError, "loss must be a tensor or a number, got str"),
        (None, TypeError, "loss must be a tensor or a number, got NoneType"),
        (torch.ones(3), ValueError, r"loss must be one number, got a tensor of shape \(3,\)"),
    ],
)
def test_a_loss_that_is_not_one_number_is_one_clear_error(tmp_path, loss, error, said):
    mon, _ = _one_backward(tmp_path)
    with pytest.raises(error, match=f"SpikeMonitor.after_backward: {said}"):
        mon.after_backward(loss)
    mon.close()


@pytest.mark.parametrize(
    "options, error, said",
    [
        ({"per_example_loss": [1.0, 2.0]}, TypeError, "per_example_loss must be a tensor"),
        (
            {"per_example_loss": "per", "example_source": torch.zeros(2)},
            TypeError,
            "per_example_loss must be a tensor, got str",
        ),
        (
            {"per_example_loss": torch.ones(2), "example_source": torch.zeros(5, dtype=int)},
            ValueError,
            "example_source has 5 entries for 2 per-example losses",
        ),
        (
            {"example_source": torch.zeros(2, dtype=int)},
            ValueError,
            "example_source has 2 entries for 0 per-example losses",
        ),
        (
            {"per_example_loss": torch.ones(2), "example_source": torch.tensor([0.5, 1.5])},
            TypeError,
            "example_source holds torch.float32, not integer ids",
        ),
        ({"phase": "a"}, TypeError, "phase must be an int or None, got str"),
        ({"phase": 10**30}, ValueError, "phase must fit 64 bits, got an int of 100 bits"),
        ({"weights": [1, 2]}, TypeError, "weights must be a dict, got list"),
    ],
)
def test_bad_per_example_source_phase_or_weights_are_one_clear_error_at_after_backward(
    tmp_path, options, error, said
):
    mon, loss = _one_backward(tmp_path)
    with pytest.raises(error, match=f"SpikeMonitor.after_backward: {said}"):
        mon.after_backward(loss.mean(), **options)
    mon.close()


@pytest.mark.parametrize(
    "total, error, said",
    [
        ("abc", TypeError, "total_norm_or_clip must be a tensor or a number, got str"),
        (torch.ones(3), ValueError, "total_norm_or_clip must be one number, got a tensor"),
        pytest.param(
            10**400,
            ValueError,
            "total_norm_or_clip is an int of 1329 bits, past a float",
            id="int-past-float",
        ),
        (-1.0, ValueError, "a total norm is never negative: -1.0"),
    ],
)
def test_a_total_norm_that_is_not_one_number_is_one_clear_error_at_after_clip(
    tmp_path, total, error, said
):
    mon, loss = _one_backward(tmp_path)
    mon.after_backward(loss.mean())
    with pytest.raises(error, match=f"SpikeMonitor.after_clip: {said}"):
        mon.after_clip(total)
    mon.close()


def test_a_nan_loss_and_a_nan_total_norm_are_still_recorded_as_a_finding(tmp_path):
    mon, _ = _one_backward(tmp_path)
    mon.after_backward(float("nan"))
    mon.after_clip(torch.tensor(float("nan")))
    mon.after_step()
    mon.close()
    assert load_run(mon.run_dir)["metrics"]["nonfinite"].tolist() == [True]


@pytest.mark.parametrize(
    "value, kept",
    [(10**30, 10**30), (-(10**30), -(10**30)), (10**400, 10**400), (2**63 - 1, 2**63 - 1)],
    ids=["past-64-bits", "negative-past-64-bits", "past-a-float", "int64-max"],
)
def test_a_framework_log_of_an_int_past_64_bits_is_kept_not_a_crash_in_on_log(
    tmp_path, value, kept
):
    mon, _ = _one_backward(tmp_path)
    mon.log_framework({"tokens_seen": value, "loss": 1.5})  # was orjson's TypeError
    mon.close()
    line = (mon.run_dir / "framework.jsonl").read_text()
    assert json.loads(line) == {"update": 0, "tokens_seen": kept, "loss": 1.5}


def test_numpy_numbers_in_a_framework_log_are_kept_and_its_update_key_kept_apart(tmp_path):
    """np.int64 is no Python int: it was dropped without a word; a logged key ``update``
    overwrote the monitor's own update number in the row."""
    mon, _ = _one_backward(tmp_path)
    mon.log_framework(
        {"step": np.int64(7), "lr": np.float32(0.5), "update": 99, "flag": np.bool_(True)}
    )
    mon.close()
    line = (mon.run_dir / "framework.jsonl").read_text()
    assert json.loads(line) == {"update": 0, "step": 7, "lr": 0.5, "logged/update": 99}
