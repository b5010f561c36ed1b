"""A run directory is untrusted input to ``--resume`` (issue 18): no code from it runs, no write
leaves it, a damaged or foreign file is one line with nothing changed, and a run stopped by
SIGTERM or a full disk continues exactly.

python -m pytest -q tests/test_hostile_resume.py
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from parked_child import PARKED_CHILD
from stopped_cascade import ARGS, stopped
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError
from andrea_diag.record import WALL_CLOCK_COLUMNS

ROOT = Path(__file__).resolve().parent.parent


def _invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    assert "Traceback" not in res.output, res.output
    return res.exit_code, res.output


def _metrics(arm_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(arm_dir / "metrics.parquet").drop(columns=list(WALL_CLOCK_COLUMNS))


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh process (the built-in repo-docs text differs inside pytest)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "andrea_diag.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def finished_sub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same uninterrupted cascade, run as a separate process."""
    out = tmp_path_factory.mktemp("ref-sub") / "c"
    res = _cli(*ARGS, "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _set_config(out: Path, **fields: object) -> None:
    """Both arms' ``config.json`` saying ``fields``: the run's word, as a hostile run would give."""
    for arm in ("none", "global"):
        path = out / arm / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


class Payload:
    """Unpickling this creates ``path``: the proof that a pickle ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.makedirs, (self.path,))


@pytest.mark.slow
def test_a_pickled_checkpoint_is_refused_and_its_payload_never_runs(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    marker = tmp_path / "pwned"
    newest = out / "none" / "checkpoints" / "ckpt-0000005.pt"
    for data in (pickle.dumps(Payload(marker)), None):
        if data is None:  # the same payload inside a torch zip, as torch.save writes it
            import torch

            torch.save({"format": "andrea-diag-checkpoint/1", "x": Payload(marker)}, newest)
        else:
            newest.write_bytes(data)
        code, output = _invoke("cascade", "--resume", str(out))
        assert code != 0 and "old pickle format, which is never loaded" in output
        assert "move" in output and "aside" in output  # how to continue
        assert not marker.exists()


@pytest.mark.slow
def test_resume_never_imports_a_factory_module_shipped_in_the_run(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    marker = tmp_path / "imported"
    for where in (out, out / "none"):
        (where / "payload.py").write_text(f"open({str(marker)!r}, 'w')\ndef make(cfg): pass\n")
    _set_config(out, model_factory="payload:make")
    # `python -m` from inside the run: the working directory is on sys.path, as an attacker
    # would hope
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for cwd in (out, out / "none"):
        res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "cascade", "--resume", "."],
                             cwd=cwd, env=env, capture_output=True, text=True)  # fmt: skip
        if cwd != out:
            assert res.returncode != 0  # "." is not a cascade there; nothing imported either
        else:
            assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
            assert "is named by the run's config.json" in res.stderr
            assert "--model payload:make" in res.stderr  # how to trust it
        assert not marker.exists()
    # given again on the command line, it is the user's own choice: imported as in a fresh run
    cmd = [sys.executable, "-m", "andrea_diag.cli", "cascade", "--resume", ".", "--model",
           "payload:make"]  # fmt: skip
    res = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
    assert marker.exists() and "returned a NoneType" in res.stderr, res.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "spec"), [("model_factory", "os:abort"), ("data_factory", "sys:exit")]
)
def test_an_installed_function_named_by_the_run_is_never_called_at_resume(
    finished_cascade: Path, tmp_path: Path, field: str, spec: str
) -> None:
    """``os:abort`` would kill the process, ``sys:exit`` end it quietly: named only by the run's
    config.json, neither is called; one line says how to give it if the user trusts it."""
    out = stopped(finished_cascade, tmp_path)
    _set_config(out, **{field: spec})
    before = _snapshot(out)
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "cascade", "--resume", str(out)],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]  # our one line, not SIGABRT's 134
    assert "is named by the run's config.json" in res.stderr and "Traceback" not in res.stderr
    assert _snapshot(out) == before


@pytest.mark.slow
def test_a_run_whose_config_asks_for_a_thousand_replicas_is_refused_before_any_fork(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    _set_config(out, replicas=1000)
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and "--nproc 1000 is more CPU worker processes" in output
    assert _snapshot(out) == before


@pytest.mark.slow
def test_resume_through_a_symlinked_table_leaves_the_outside_file_unchanged(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    outside = tmp_path / "victim.txt"
    outside.write_text("keep me\n" * 100)
    (out / "none" / "events.jsonl").unlink()
    (out / "none" / "events.jsonl").symlink_to(outside)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code != 0 and ("is a symbolic link" in output or "points outside" in output)
    assert outside.read_text() == "keep me\n" * 100


@pytest.mark.parametrize("name", ["eval.csv", "summary.json", "metrics.parquet"])
def test_a_directory_where_a_rewritten_file_belongs_is_one_line_and_kept(
    finished_cascade: Path, tmp_path: Path, name: str
) -> None:
    out = stopped(finished_cascade, tmp_path)
    planted = out / "none" / name
    planted.unlink(missing_ok=True)
    planted.mkdir()
    (planted / "keep.txt").write_text("not the run's")
    code, output = _invoke("cascade", "--resume", str(out))
    # one line naming it: from the rewind, or earlier where a reader meets it first
    error = next(line for line in output.splitlines() if line.startswith("error:"))
    assert code != 0 and output.count("error:") == 1 and str(planted) in error
    assert "is a directory, not the file" in error or "is not a regular file" in error
    assert (planted / "keep.txt").read_text() == "not the run's"  # nothing of it deleted


def test_an_appended_table_never_follows_a_link(tmp_path: Path) -> None:
    from andrea_diag.jsonl import JsonlWriter

    inside = tmp_path / "real.jsonl"  # even a link to a file inside the run is refused
    inside.write_text('{"a": 1}\n{"torn')
    (tmp_path / "metrics.jsonl").symlink_to(inside)
    with pytest.raises(UserError, match="is a symbolic link"):
        JsonlWriter(tmp_path / "metrics.jsonl")
    assert inside.read_text() == '{"a": 1}\n{"torn'  # not even its torn tail was cut


@pytest.mark.slow
def test_a_symlinked_json_file_is_replaced_not_written_through(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    outside = tmp_path / "victim.json"
    outside.write_text("keep me")
    (out / "none" / "env.json").unlink()
    (out / "none" / "env.json").symlink_to(outside)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 0, output
    assert outside.read_text() == "keep me"
    assert not (out / "none" / "env.json").is_symlink()


# Tampering a resume refuses before it moves anything: what is done to the stopped cascade
# (returning the folder that must stay byte for byte as it was) and what the refusal says.


def _arm_named(arm: str) -> Callable[[Path, Path], Path]:
    def damage(out: Path, tmp_path: Path) -> Path:
        meta = json.loads((out / "cascade.json").read_text())
        (out / "cascade.json").write_text(json.dumps({**meta, "arms": ["none", arm]}))
        return out

    return damage


def _arm_linked_out(out: Path, tmp_path: Path) -> Path:
    shutil.move(out / "none", tmp_path / "elsewhere")
    (out / "none").symlink_to(tmp_path / "elsewhere")
    return tmp_path / "elsewhere"


def _checkpoints_linked_out(out: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    shutil.move(out / "none" / "checkpoints", outside)
    (out / "none" / "checkpoints").symlink_to(outside)
    return outside


def _foreign_checkpoint(out: Path, tmp_path: Path) -> Path:
    ckpts = out / "none" / "checkpoints"
    shutil.copy(out / "global" / "checkpoints" / "ckpt-0000004.pt", ckpts / "ckpt-0000005.pt")
    return out


def _metrics_shorter_than_checkpoint(out: Path, tmp_path: Path) -> Path:
    metrics = out / "none" / "metrics.jsonl"
    metrics.write_bytes(b"".join(metrics.read_bytes().splitlines(keepends=True)[:2]))
    return out  # the short file neither cut nor padded (with NUL bytes, say)


REFUSED = [
    *(pytest.param(_arm_named(arm), ["arm"], id=f"arm name {arm[:10]}")
      for arm in ["../outside", "/tmp", "..", "a" * 300]),
    pytest.param(_arm_linked_out, ["points outside"], id="arm linked out"),
    pytest.param(_checkpoints_linked_out,
                 ["the checkpoints folder 'checkpoints' points outside"],
                 id="checkpoints linked out"),
    pytest.param(_foreign_checkpoint, ["is from another run: arm 'global', this run 'none'"],
                 id="foreign checkpoint"),
    pytest.param(_metrics_shorter_than_checkpoint,
                 ["is shorter", "than checkpoint ckpt-0000004.pt"], id="metrics shorter"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "says"), REFUSED)
def test_a_tampered_run_is_refused_at_resume_and_left_unchanged(
    finished_cascade: Path, tmp_path: Path, damage: Callable[[Path, Path], Path], says: list[str]
) -> None:
    out = stopped(finished_cascade, tmp_path)
    kept = damage(out, tmp_path)
    before = _snapshot(kept)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code != 0 and all(s in output for s in says), output
    assert _snapshot(kept) == before  # nothing moved, cut or rewritten


@pytest.mark.slow
def test_a_torn_newest_checkpoint_falls_back_to_the_one_before(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    newest = out / "none" / "checkpoints" / "ckpt-0000004.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 0, output
    assert "ckpt-0000004.pt cannot be read; continuing from the checkpoint before it" in output
    assert "none: continuing from ckpt-0000002.pt" in output
    pd.testing.assert_frame_equal(_metrics(out / "none"), _metrics(finished_cascade / "none"))


@pytest.mark.slow
def test_a_bit_flip_in_a_checkpoint_is_caught_by_its_checksum(
    finished_cascade: Path, tmp_path: Path
) -> None:
    from andrea_diag.train.checkpoint import UnreadableCheckpoint, read_checkpoint

    path = tmp_path / "ckpt-0000004.pt"
    data = bytearray((finished_cascade / "none" / "checkpoints" / path.name).read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(UnreadableCheckpoint, match="cannot be read"):
        read_checkpoint(path)


@pytest.mark.slow
def test_a_second_resume_waits_for_the_lock_before_moving_anything(
    finished_cascade: Path, tmp_path: Path
) -> None:
    """An arm with rows but no checkpoint is moved aside by a resume: never while another
    live process holds the cascade."""
    out = stopped(finished_cascade, tmp_path)
    shutil.rmtree(out / "none" / "checkpoints")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from andrea_diag.runlock import RunLock\n"
         f"with RunLock({str(out)!r}):\n    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        before = _snapshot(out)
        code, output = _invoke("cascade", "--resume", str(out))
        assert code != 0 and f"is in use by process {holder.pid}" in output
        assert _snapshot(out) == before and not list(out.glob("none.incomplete-*"))
    finally:
        holder.kill()
        holder.wait()
    code, output = _invoke("cascade", "--resume", str(out))  # the holder gone: it continues
    assert code == 0, output
    assert list(out.glob("none.incomplete-*"))
    assert not (out / "run.lock").exists() and not (out / "none" / "run.lock").exists()


def _damage_config_steps(out: Path) -> None:
    path = out / "none" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "steps": "16"}))


DAMAGE = {
    "steps-a-string": (_damage_config_steps, "steps is '16'"),
    "config-a-list": (lambda o: (o / "none" / "config.json").write_text("[1, 2]"), "holds a list"),
    "config-torn": (lambda o: (o / "none" / "config.json").write_text('{"size": "ti'), "not valid"),
    "config-binary": (lambda o: (o / "none" / "config.json").write_bytes(b"\xff\xfe\0"), "UTF-8"),
    "config-a-fifo": (lambda o: ((o / "none" / "config.json").unlink(),
                                 os.mkfifo(o / "none" / "config.json")), "not a regular file"),
    "summary-a-list": (lambda o: (o / "global" / "summary.json").write_text("[]"), "holds a list"),
    "summary-torn": (lambda o: (o / "global" / "summary.json").write_text('{"a": '), "not valid"),
    "seed-huge": (lambda o: (o / "none" / "config.json").write_text(
        (o / "none" / "config.json").read_text().replace('"seed": 0', '"seed": 18446744073709551617')
    ), "seed is"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_saved_file_is_one_line(
    finished_cascade: Path, tmp_path: Path, damage: str
) -> None:
    out = stopped(finished_cascade, tmp_path)
    make, message = DAMAGE[damage]
    make(out)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code != 0 and message in output, output


def test_a_full_disk_during_a_write_is_one_line_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import safetensors.torch

    from andrea_diag.jsonl import JsonlWriter
    from andrea_diag.train.checkpoint import Checkpointer

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(UserError, match="no space left on the device"):
        Checkpointer(tmp_path, every=1).save({"update": 1}, 1)
    assert list((tmp_path / "checkpoints").iterdir()) == []  # no .tmp left
    w = JsonlWriter(tmp_path / "metrics.jsonl")
    w.write({"update": 1})
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UserError, match="no space left on the device"):
        w.write({"update": 2})
    w.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0]) == {"update": 1}


def test_a_binary_or_overlong_source_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "weights.txt"
    binary.write_bytes(b"PK\x03\x04\0\0\x80garbage")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    for path, message in [(binary, "contains NUL bytes"), (latin, "is not UTF-8 text"),
                          (tmp_path / ("x" * 300 + ".txt"), "longer than 255 bytes")]:  # fmt: skip
        code, output = _invoke(*ARGS, "--out", str(tmp_path / "o"), "--source", f"repo-docs={path}")
        assert code != 0 and message in output, output
    code, output = _invoke("cascade", "--resume", str(tmp_path / ("y" * 300)))
    assert code != 0 and "longer than 255 bytes" in output and output.count("error:") == 1, output


def test_the_state_codec_refuses_classes_outside_its_allow_list() -> None:
    from andrea_diag.train.state_codec import StateFormatError, decode

    for tree in ({"$object": "os.system", "state": {}}, {"$object": "subprocess.Popen",
                 "state": {"args": "x"}}, {"$tensor": 3}, {"$npscalar": "O", "value": 1}):  # fmt: skip
        with pytest.raises(StateFormatError):
            decode(tree, [])


def _mount_tmpfs(path: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True)  # fmt: skip
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode()[-200:]}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line_and_resume_finishes_it(
    finished_cascade: Path, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "12m")  # rows and a first checkpoint fit; not the second arm's
    try:
        out = disk / "c"
        code, output = _invoke(*ARGS, "--out", str(out))
        assert code != 0 and "no space left on the device" in output, output
        files = [p for p in out.rglob("*") if p.is_file()]
        assert not [p for p in files if p.name.endswith(".tmp")]
        assert not [p for p in files if p.suffix == ".parquet" and p.stat().st_size == 0]
        assert not list(out.rglob("run.lock"))  # every lock released
        assert (out / "none" / "metrics.jsonl").stat().st_size > 0  # the rows written are kept
        subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)
        code, output = _invoke("cascade", "--resume", str(out))
        assert code == 0, output
        for arm in ("none", "global"):
            pd.testing.assert_frame_equal(_metrics(out / arm), _metrics(finished_cascade / arm))
    finally:
        _umount(disk)


@pytest.mark.slow
def test_a_read_only_run_dir_is_one_line_for_resume(finished_cascade: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "64m")
    try:
        out = stopped(finished_cascade, disk)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        code, output = _invoke("cascade", "--resume", str(out))
        assert code != 0 and "Read-only file system" in output, output
    finally:
        _umount(disk)


@pytest.mark.slow
@pytest.mark.parametrize(("signame", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_signal_stops_the_cascade_like_ctrl_c_and_resume_finishes_it(
    finished_sub: Path, tmp_path: Path, signame: str, code: int
) -> None:
    import signal

    if signal.getsignal(getattr(signal, signame)) == signal.SIG_IGN:
        pytest.skip(f"{signame} is ignored here (nohup): the child would inherit that")
    out = tmp_path / "c"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", PARKED_CHILD, *ARGS, "--out", str(out)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=env)  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        seen = 0
        while seen < 3:  # the first arm parked after update 3 (a checkpoint at 2)
            line = proc.stdout.readline().decode()
            assert line, log.read_text()[-2000:]
            if line.startswith("reached"):
                seen += 1
                if seen < 3:
                    proc.stdin.write(b"go\n")
                    proc.stdin.flush()
        proc.send_signal(getattr(signal, signame))
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.wait() == code, log.read_text()[-2000:]
    text = log.read_text()
    assert f"stopped by {signame}" in text and "Traceback" not in text
    assert json.loads((out / "none" / "partial_summary.json").read_text())["status"] == "crashed"
    assert len((out / "none" / "metrics.jsonl").read_text().splitlines()) == 3  # flushed
    assert not list(out.rglob("run.lock"))
    res = _cli("cascade", "--resume", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    for arm in ("none", "global"):
        pd.testing.assert_frame_equal(_metrics(out / arm), _metrics(finished_sub / arm))


@pytest.mark.parametrize("table", ["events.jsonl", "metrics.jsonl", "samples.jsonl"])
def test_a_resume_never_changes_a_file_hard_linked_into_the_run(
    finished_cascade: Path, tmp_path: Path, table: str
) -> None:
    """The tables are cut back to the checkpoint and appended to in place: a hard link planted
    there (or a run copied with ``cp -al``) must not carry those writes to the other name."""
    out = stopped(finished_cascade, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\nline2\n")
    (out / "none" / table).unlink()
    os.link(victim, out / "none" / table)
    _invoke("cascade", "--resume", str(out))  # refused or not: the victim is what matters
    assert victim.read_bytes() == b"precious\nline2\n"


def test_resuming_a_cp_al_copy_leaves_the_original_run_as_it_was(
    finished_cascade: Path, tmp_path: Path
) -> None:
    original = stopped(finished_cascade, tmp_path / "a")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(original), str(copy)], check=True)
    before = _snapshot(original)
    code, output = _invoke("cascade", "--resume", str(copy))
    assert code == 0, output
    assert _snapshot(original) == before
    assert _metrics(copy / "none").equals(_metrics(finished_cascade / "none"))


def test_a_source_path_named_only_by_the_runs_config_is_not_read_on_resume(
    finished_cascade: Path, tmp_path: Path
) -> None:
    """A planted ``sources`` entry would make the resume train on (and checkpoint) files of
    the user's: refused in one line, nothing changed, until the user types the path again."""
    out = stopped(finished_cascade, tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "notes.txt").write_text("TOP SECRET hunter2 " * 400)
    _set_config(out, sources={"gutenberg": str(secret)})
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and "names --source gutenberg=" in output and output.count("error:") == 1
    assert "give it again" in output and _snapshot(out) == before
    _set_config(out, sources={}, hf_config=str(tmp_path / "cfg.json"))
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and "names --hf-config" in output, output


def test_a_source_path_typed_again_on_resume_is_the_users_own(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("plain words for a tiny run, repeated. " * 300)
    out = tmp_path / "c"
    argv = [*ARGS, "--steps", "4", "--source", f"repo-docs={docs}"]
    assert _invoke(*argv, "--out", str(out))[0] == 0
    (out / "none" / "summary.json").unlink()
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and "names --source repo-docs=" in output, output
    code, output = _invoke("cascade", "--resume", str(out), "--source", f"repo-docs={docs}")
    assert code == 0, output


def _recraft(ckpt: Path, mutate: Callable[[dict], None]) -> None:
    """Rewrite a checkpoint with ``mutate`` applied and a valid CRC: the CRC guards against a
    torn write, not against whoever made the run directory."""
    from andrea_diag.train.checkpoint import FORMAT, STATE_KEY, _crc, _write_atomic, read_checkpoint
    from andrea_diag.train.state_codec import encode

    state = read_checkpoint(ckpt)
    mutate(state)
    tree, tensors = encode(state)
    named = {f"t{i:06d}": t for i, t in enumerate(tensors)}
    named[STATE_KEY] = torch.frombuffer(bytearray(json.dumps(tree).encode()), dtype=torch.uint8)
    _write_atomic(ckpt, named, {"format": FORMAT, "crc32": _crc(named)})


def _wrong_shape(s: dict) -> None:
    s["trainer"]["model"]["wte.weight"] = torch.zeros(10, 3)


def _bad_rng(s: dict) -> None:
    s["rng"]["torch"] = torch.zeros(3, dtype=torch.uint8)


@pytest.mark.parametrize("mutate", [_wrong_shape, _bad_rng, lambda s: s.pop("trainer")],
                         ids=["wrong-shape", "bad-rng", "no-trainer"])  # fmt: skip
def test_a_checkpoint_that_does_not_fit_is_one_line_and_cuts_no_table(
    finished_cascade: Path, tmp_path: Path, mutate: Callable[[dict], None]
) -> None:
    out = stopped(finished_cascade, tmp_path)
    from andrea_diag.train.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, mutate)
    tables = {n: (out / "none" / n).read_bytes() for n in ("metrics.jsonl", "events.jsonl")}
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and output.count("error:") == 1, output
    assert "does not fit this run" in output, output
    assert {n: (out / "none" / n).read_bytes() for n in tables} == tables


@pytest.mark.parametrize("value", [1e308, 150.0])
def test_a_mixer_sharpness_past_its_bound_is_one_line_typed_or_read_from_the_run(
    finished_cascade: Path, tmp_path: Path, value: float
) -> None:
    code, output = _invoke(*ARGS, "--mixer-sharpness", str(value), "--out", str(tmp_path / "o"))
    assert code == 2 and "--mixer-sharpness must be at most 100" in output
    out = stopped(finished_cascade, tmp_path)
    _set_config(out, mixer_sharpness=value)
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 2 and output.count("error:") == 1, output


def test_a_kept_row_with_an_integer_past_the_float_range_is_a_gap_not_a_traceback(
    finished_cascade: Path, tmp_path: Path
) -> None:
    """The rows a resume keeps are the run dir's word; the close (summary, parquet) cleans
    them as the report does. The row is rewritten to its own byte length, so the checkpoint's
    table positions still hold."""
    out = stopped(finished_cascade, tmp_path)
    path = out / "none" / "metrics.jsonl"
    lines = path.read_bytes().split(b"\n")
    row = json.loads(lines[0])
    small = {"update": row["update"], "loss": row["loss"], "grad_norm": 10**400}
    text = json.dumps(small).encode()
    assert len(text) < len(lines[0])
    lines[0] = text[:-1] + b" " * (len(lines[0]) - len(text)) + b"}"
    path.write_bytes(b"\n".join(lines))
    code, output = _invoke("cascade", "--resume", str(out))
    assert code == 0, output
    m = pd.read_parquet(out / "none" / "metrics.parquet")
    assert math.isnan(m["grad_norm"].iloc[0]) and len(m) == len(_metrics(finished_cascade / "none"))
