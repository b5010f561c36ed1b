"""``SpikeMonitor`` inside the user's loop, fed hostile or damaged input: a runs folder where
the next ``out_dir-N`` name is a file or a planted link, and ``out_dir`` names without a last
component (``.``). Each is one clear ``ValueError``/``TypeError`` or a run written in a fresh
folder of its own, never a raw ``pathlib`` error and never a run written through a link."""

from __future__ import annotations

import os
from pathlib import Path

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
