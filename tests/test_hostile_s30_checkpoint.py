"""Checkpoints of a hostile or oddly named run directory (round 30):

- a run folder named in another encoding (``run\\xff``, ``run\\udcff`` to Python) held a good
  checkpoint that safetensors refused to open ("Path ... is not valid UTF-8"): it read as torn,
  "delete it". It is now opened through the descriptor the checks opened, as the parquet
  reader's table is;
- the file checked (a regular file, its size) was not the file read: safetensors opened the
  path again, so a file swapped in between was the one mapped.

python -m pytest -q tests/test_hostile_s30_checkpoint.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from andrea_diag.errors import UserError
from andrea_diag.train import checkpoint
from andrea_diag.train.checkpoint import (
    Checkpointer,
    UnreadableCheckpoint,
    checkpoints,
    latest_checkpoint,
    read_checkpoint,
)


def _saved(run: Path, update: int = 1) -> Path:
    run.mkdir(exist_ok=True)
    (run / "config.json").write_text(json.dumps({"size": "tiny"}))
    state = {"identity": {"size": "tiny"}, "weights": torch.arange(6.0), "update": update}
    return Checkpointer(run, every=1).save(state, update)


def test_a_checkpoint_in_a_folder_named_in_another_encoding_is_read(tmp_path: Path) -> None:
    run = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xff"))
    path = _saved(run)
    state = read_checkpoint(path, expect={"size": "tiny"})
    assert torch.equal(state["weights"], torch.arange(6.0))
    assert state["update"] == 1


def test_a_checkpoint_written_in_a_folder_named_in_another_encoding_lands_there(
    tmp_path: Path,
) -> None:
    run = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xfe"))
    path = _saved(run, update=3)
    assert os.listdir(os.fsencode(run / "checkpoints")) == [b"ckpt-0000003.pt"]
    assert read_checkpoint(path)["update"] == 3


def test_the_checkpoint_read_is_the_file_checked_not_one_swapped_in_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torn file renamed over the checked one between the check and the read: the read is
    of the descriptor the check opened, so the checked (good) file is the one read."""
    path = _saved(tmp_path / "run")
    torn = tmp_path / "torn"
    torn.write_bytes(path.read_bytes()[:100])
    checked = checkpoint.check_file_size

    def swap_after_check(*args: object) -> None:
        checked(*args)  # type: ignore[arg-type]
        os.replace(torn, path)

    monkeypatch.setattr(checkpoint, "check_file_size", swap_after_check)
    assert torch.equal(read_checkpoint(path)["weights"], torch.arange(6.0))
    monkeypatch.undo()
    with pytest.raises(UnreadableCheckpoint):  # the swapped file is torn: it is now read
        read_checkpoint(path)


def test_a_fifo_in_place_of_a_checkpoint_is_one_line_without_blocking(tmp_path: Path) -> None:
    path = _saved(tmp_path / "run")
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(UserError, match="not a regular file"):
        read_checkpoint(path)


def test_a_checkpoint_linked_out_of_its_run_is_refused(tmp_path: Path) -> None:
    outside = _saved(tmp_path / "other")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    link = run / "checkpoints" / "ckpt-0000001.pt"
    link.symlink_to(outside)
    with pytest.raises(UserError, match="link out of its run"):
        read_checkpoint(link)


def test_a_checkpoint_name_the_run_never_writes_is_neither_read_nor_costs_the_fallback(
    tmp_path: Path,
) -> None:
    """``ckpt-zzz.pt`` sorted after every real name: it was the "newest" a resume read, and
    each save kept it while deleting the run's own fallback checkpoint."""
    run = tmp_path / "run"
    first = _saved(run, update=1)
    planted = run / "checkpoints" / "ckpt-zzz.pt"
    planted.write_bytes(first.read_bytes())
    ckpt = Checkpointer(run, every=1)
    for update in (2, 3):
        ckpt.save({"identity": {"size": "tiny"}, "update": update}, update)
    names = [p.name for p in checkpoints(run)]
    assert names == ["ckpt-0000002.pt", "ckpt-0000003.pt"]  # two of the run's own, kept
    assert latest_checkpoint(run) == run / "checkpoints" / "ckpt-0000003.pt"
    assert planted.exists()  # not the run's: neither read nor deleted


def test_checkpoints_are_ordered_by_update_not_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in ("ckpt-9999999.pt", "ckpt-10000000.pt"):
        (folder / name).write_bytes(b"x")
    assert latest_checkpoint(tmp_path) == folder / "ckpt-10000000.pt"


def test_a_folder_at_the_next_checkpoints_name_is_one_line_saying_to_move_it(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    _saved(run, update=1)
    (run / "checkpoints" / "ckpt-0000002.pt").mkdir()
    with pytest.raises(UserError, match=r"cannot write checkpoint .*ckpt-0000002.pt") as e:
        Checkpointer(run, every=1).save({"identity": {"size": "tiny"}}, 2)
    assert "move that folder out of the run" in (e.value.hint or "")
    assert (run / "checkpoints" / "ckpt-0000002.pt").is_dir()  # not ours to delete
    assert not list((run / "checkpoints").glob(".ckpt-*.tmp"))  # no temp file left


def test_without_a_descriptor_folder_entry_the_path_is_opened_or_a_non_utf8_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where neither /proc/self/fd/N nor /dev/fd/N exists (FreeBSD without fdescfs holds 0-2
    only), the checkpoint's own path is given to safetensors; a path it cannot take (not
    UTF-8) is one line saying to rename the folder, not "torn: delete it"."""
    from andrea_diag.train import checkpoint as ck

    real = os.path.exists
    monkeypatch.setattr(
        os.path,
        "exists",
        lambda p: False if str(p).startswith(("/proc/self/fd/", "/dev/fd/")) else real(p),
    )
    assert ck.fd_path(7, tmp_path / "ckpt-0000001.pt") == str(tmp_path / "ckpt-0000001.pt")
    with pytest.raises(UserError, match="not UTF-8"):
        ck.fd_path(7, Path(os.fsdecode(b"/tmp/run\xff/ckpt-0000001.pt")))
