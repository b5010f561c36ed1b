"""Continuing a stopped cascade: which arms are done, which continue from a checkpoint, and
whether the command asks for the run that is on disk.

    andrea-diag cascade --resume runs/cascade-tiny-20261129-2200   # the run's own options
    andrea-diag train --resume runs/train-12m-...                  # one arm

Per arm: ``summary.json`` present → done, kept; a checkpoint → continue from the newest one
that reads (a torn newest one falls back to the one before it, with a line saying so; rows
after it are cut, so none is duplicated); rows but no checkpoint (killed before the first one)
→ the partial arm is moved aside, never deleted, and the arm starts again.

The run directory is untrusted input: every arm name resolves inside it and is a clip mode,
every file is checked for its shape, a saved config.json passes every check a typed option
would (a value it refuses is said of the file: :func:`said_of`), a checkpoint must belong to
this arm (arm, clip mode and its parameters, seed, lr, size, precision) and fit its model and
optimizer before its tensors are read, and its metrics file must still hold every row the
checkpoint counts, else one line and nothing changed. The caller holds the cascade's lock (``cascade.py``) before
anything is moved, and an arm whose own lock is held by a live process is never touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from andrea_diag.clip.modes import CLIPPERS
from andrea_diag.config import RUNTIME_KEYS, RunConfig  # RUNTIME_KEYS: what a resume may change
from andrea_diag.errors import UserError
from andrea_diag.experiments.arm_summary import arm_summary
from andrea_diag.experiments.config_checks import check_config
from andrea_diag.experiments.saved_config import saved_config
from andrea_diag.factories import build_model
from andrea_diag.record import read_cascade_meta
from andrea_diag.rundir import MAX_TABLE_BYTES, check_size, child, open_regular
from andrea_diag.runlock import holder_alive, read_lock
from andrea_diag.train.checkpoint import (
    FOLDER,
    UnreadableCheckpoint,
    checkpoints,
    read_checkpoint,
    run_identity,
)
from andrea_diag.train.checkpoint_fit import Need, need_for, need_of

TABLES = ("metrics.jsonl", "events.jsonl", "samples.jsonl")  # the Recorder's (record.py)


def move_aside(path: Path) -> Path:
    """An unfinished directory is kept (renamed ``<name>.incomplete-<n>``), never deleted.

    Refused while a live process holds the arm's own lock (it is still writing there)."""
    info = read_lock(path)
    if holder_alive(info):
        raise UserError(
            f"{path} is in use by process {info.pid if info else '?'}",
            hint="wait for it to finish; nothing was moved",
        )
    n = 1
    # lexists: a dangling link at a name is taken too (the rename onto it failed)
    while os.path.lexists(aside := path.with_name(f"{path.name}.incomplete-{n}")):
        n += 1
    try:
        path.rename(aside)
    except OSError as exc:
        raise UserError(f"cannot move {path} aside ({exc.strerror})") from None
    return aside


def arm_state(
    arm_dir: Path, cfg: RunConfig | None = None, warn: Callable[[str], None] | None = None
) -> tuple[str, Any]:
    """("done", summary) | ("checkpoint", path) | ("restart", None) | ("new", None).

    With ``cfg``, a checkpoint is read and checked before it is chosen (see the module
    docstring); ``warn`` hears about a torn newest checkpoint that was passed over."""
    if os.path.lexists(arm_dir / "summary.json"):  # a link or FIFO there: read_json's line
        # the run's word, as the report takes it: a field of the wrong type dropped, a figure
        # its own metrics table contradicts replaced by the table's (arm_summary.py)
        return "done", arm_summary(arm_dir)
    if os.path.lexists(arm_dir / FOLDER):  # linked out of the run: refused before any read
        child(arm_dir, FOLDER, "the checkpoints folder")
    found = checkpoints(arm_dir)
    if not found:
        return ("restart", None) if arm_dir.exists() else ("new", None)
    if cfg is None:
        return "checkpoint", found[-1]
    # what the arm's model and optimizer hold: a checkpoint's header is checked against it
    # (sizes, dtypes, shapes) and its identity against the arm's before its tensors are read
    need, expect = arm_need(cfg), run_identity(cfg.to_dict())
    for i, ckpt in enumerate(reversed(found)):
        try:
            state = read_checkpoint(ckpt, need, expect)
        except UnreadableCheckpoint as exc:
            if i == len(found) - 1:  # the oldest kept one too: nothing to fall back to
                raise
            if warn is not None:
                warn(f"{exc.message}; continuing from the checkpoint before it")
            continue
        check_rows(arm_dir, ckpt, state.get("recorder"))
        update = state.get("update")
        if type(update) is int and update > cfg.steps:  # it would train nothing, then say done
            raise UserError(f"checkpoint {ckpt} is at update {update}, past the {cfg.steps} "
                            f"steps of {arm_dir / 'config.json'}", hint="the run's config.json "
                            "is damaged, or the checkpoint is another run's (nothing was changed)")  # fmt: skip
        return "checkpoint", ckpt
    raise AssertionError("unreachable: the oldest checkpoint's failure is raised above")


def arm_need(cfg: RunConfig) -> Need | None:
    """What the arm's model and optimizer hold, built on the meta device (no memory): the
    toolkit GPT from ``cfg``, a ``--model`` or ``--hf-config`` one by the trainer's own builder.
    Only what this command line typed is built: a factory named by the run's config.json alone
    is refused by ``factories.load_factory``, an --hf-config by ``commands/options.py``."""
    if not (cfg.model_factory or cfg.hf_config):
        return need_for(cfg)
    try:
        with torch.device("meta"):
            model = build_model(cfg, checked=False)
    except Exception:  # a factory that cannot build on meta (it loads weights, or moves its
        # model to a device): the trainer checks the checkpoint against the model it builds
        return None
    return need_of(model, cfg)


def check_rows(arm_dir: Path, ckpt: Path, positions: Any) -> None:
    """Every JSONL table must still hold the bytes the checkpoint counts (a shorter one lost
    rows; truncate() would pad it with NUL bytes): one line, nothing changed."""
    if not isinstance(positions, dict):
        raise UserError(f"checkpoint {ckpt} holds no recorder position", hint="it is damaged")
    for name in dict.fromkeys([*TABLES, *map(str, positions)]):
        path = child(arm_dir, name, "a table of the checkpoint")
        if path.is_file():  # a planted 40 GB sparse file: its tail is read on reopening
            check_size(path, name, MAX_TABLE_BYTES, "more than this reader takes")
    for name, size in positions.items():
        path = child(arm_dir, str(name), "a table of the checkpoint")
        have = _table_size(path, str(name))
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise UserError(f"checkpoint {ckpt} holds a bad position for {name}: {size!r}")
        if have < size:
            raise UserError(
                f"{path} is shorter ({have} bytes) than checkpoint {ckpt.name} says ({size} bytes)",
                hint="rows were lost after the checkpoint; restore the file, or delete the "
                "arm's checkpoints to restart it (nothing was changed)",
            )
        if size and _byte_before(path, size) != b"\n":
            # the rows the checkpoint counts end in a newline, as the writer leaves them: the
            # recorder would cut the table back to its last newline (a "torn" tail) before this
            # check could run again, and then say the rows were lost
            raise UserError(f"{path} has no row end where checkpoint {ckpt.name} says its rows "
                            f"end (byte {size})", hint="the table is damaged; restore it, or "
                            "delete the arm's checkpoints to restart it (nothing was changed)")  # fmt: skip


def _table_size(path: Path, name: str) -> int:
    """A table's size, 0 when absent. A FIFO, a folder or a dangling link in its place is said
    as what it is (it read as "shorter (0 bytes) than the checkpoint says")."""
    if not os.path.lexists(path):
        return 0
    with open_regular(path, name) as f:  # sized through the descriptor the check opened
        return os.fstat(f.fileno()).st_size


def _byte_before(path: Path, size: int) -> bytes:
    """The byte at ``size - 1`` of a table already sized (``check_size``), read unblocked."""
    with open_regular(path, "a table of the checkpoint") as f:
        f.seek(size - 1)
        return f.read(1)


def check_run_dir(out_dir: Path) -> None:
    """``out_dir`` is a directory that can be looked at, or one line (too long a name, ...)."""
    try:
        is_dir = Path(out_dir).is_dir()
    except OSError as exc:  # ENAMETOOLONG, ELOOP, EACCES
        raise UserError(f"cannot open {str(out_dir)[:80]!r}... ({exc.strerror})") from None
    if not is_dir:
        raise UserError(
            f"{out_dir} is not a directory",
            hint="pass the --out directory of `andrea-diag cascade` or `train`",
        )


def cascade_arms(out_dir: Path, meta: dict[str, Any]) -> list[str]:
    """cascade.json's arm names, each one plain name that resolves inside ``out_dir``."""
    arms = meta.get("arms")
    if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
        raise UserError(f"{out_dir / 'cascade.json'}: arms is not a list of names")
    if len(set(arms)) != len(arms):
        raise UserError(f"{out_dir / 'cascade.json'} lists an arm twice")
    for arm in arms:
        child(out_dir, arm, "arm")
        if arm not in CLIPPERS:  # each arm is a clip mode (--clip): said of the file
            raise UserError(
                f"{out_dir / 'cascade.json'} lists arm {arm!r}, which is no clip mode "
                f"(choose from {', '.join(CLIPPERS)})",
                hint="the file is damaged or edited; restore it, or start the run again",
            )
    return arms


@contextlib.contextmanager
def said_of(path: Path) -> Iterator[None]:
    """A value a check refuses, said of the saved file it came from, not of an option the user
    never typed ("unknown precision 'fp8'", "--lr must be ..."): the run's own word."""
    try:
        yield
    except UserError as exc:
        if str(path) in exc.message:  # saved_config's own line already names it
            raise
        why = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
        raise UserError(
            f"{path} holds a value no run takes: {why}",
            hint="the file is damaged or edited; restore it, or start the run again",
        ) from None


def check_saved(cfg: RunConfig) -> None:
    """What a typed config is checked for beyond ``RunConfig.resolve`` (config_checks.py, the
    same checks as the command line's), the fields named as the file names them. Run inside
    :func:`said_of` for a saved config."""
    check_config(cfg, name=lambda field: field)


def run_configs(out_dir: Path) -> tuple[dict[str, Any], list[RunConfig]]:
    """The cascade's meta and each started arm's saved config (a bad file: one clear line)."""
    check_run_dir(out_dir)
    meta = read_cascade_meta(out_dir)
    configs = []
    for arm in cascade_arms(out_dir, meta):
        path = child(out_dir, arm, "arm") / "config.json"
        if os.path.lexists(path):  # a FIFO or a link too: refused by saved_config, not skipped
            try:
                with said_of(path):
                    cfg = saved_config(path, arm)
                    check_saved(cfg)
                configs.append(cfg)
            except UserError as exc:  # said as before: which kind of trouble, then where
                raise UserError(f"a run file is corrupt: {exc.message}", hint=exc.hint) from None
    return meta, configs


def check_same_run(out_dir: Path, arms: list[str], configs: list[RunConfig]) -> None:
    """Refuse, in one line, a resume whose options differ from the run's own."""
    meta, saved = run_configs(out_dir)
    if meta.get("arms") != arms:
        raise UserError(
            f"{out_dir} has arms {','.join(meta.get('arms', []))}, the command asks for "
            f"{','.join(arms)}",
            hint="resume with the run's own options (or only --resume DIR)",
        )
    by_arm = {c.arm: c for c in configs}
    for old in saved:
        new = by_arm[old.arm]
        a, b = old.resolve().to_dict(), new.to_dict()
        diff = sorted(
            k for k in a.keys() | b.keys() if k not in RUNTIME_KEYS and a.get(k) != b.get(k)
        )
        if diff:
            what = ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:3])
            moved = old.size == "tiny" and {"lr", "inject", "mixer_sharpness"} & set(diff)
            raise UserError(
                f"{out_dir} was run with other options ({what})",
                hint="resume with the run's own options (or only --resume DIR)"
                + ("; tiny's defaults moved on 2026-12-01 (lr 2e-3, outlier@190, mixer sharpness "
                   "4): an older tiny run continues with --lr 3e-4 --steps 240 "
                   "--mixer-sharpness 1" if moved else ""),
            )  # fmt: skip
