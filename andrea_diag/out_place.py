"""Where a command's output may land: never among the records of a run, cascade or sweep that
the command does not own.

    refuse_records(out, "--out", reads=run_dirs, file=True)    # report's page
    refuse_records(tb / name, "--out", reads=runs)             # export's folders

A run folder (its ``config.json`` beside its tables) is never a place for another command's
output: beside its records a page is taken for one of them, and a resumed or re-rendered run
may replace it. A cascade or sweep folder is a place only for a command that reads runs in it
(a comparison page beside the arms it compares, export's default ``tensorboard`` folder), and
then not inside one of the cascade's arm folders, started or not. Everything is judged on the
resolved path (a link to a run is the run; a folder above the output that is a link is
followed), before anything is made, each refusal one :class:`UserError` line.

``report C/none --out C/global/x.html`` wrote the page into the sibling arm ``global``, and
``--out C2/x.html`` (a cascade not read) into another cascade's folder.

A command that makes a folder of its own records (train, cascade, sweep, ladder, a bench or a
check) is held to :func:`refuse_nested`: its ``--out`` neither is nor is inside a run, cascade
or sweep folder, but for the one it continues (a sweep re-run on its folder) and a sweep's
cell, which its sweep names. ``train --out C/none/sub`` made a cascade inside the arm ``none``.
What lies at the name of a file the command writes is held to :func:`replaceable`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from andrea_diag.errors import UserError
from andrea_diag.rundir import read_json

# what marks a folder, first match wins: a cascade, a sweep (a ladder is one), or a run (its
# config beside any record a run writes first: SpikeMonitor's runs have no env.json)
MARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cascade", ("cascade.json",)),
    ("sweep", ("sweep.json",)),
    ("run", ("config.json", "metrics.jsonl")),
    ("run", ("config.json", "metrics.parquet")),
    ("run", ("config.json", "events.jsonl")),
    ("run", ("config.json", "env.json")),
)
HINT = "write it outside the runs, e.g. --out compare.html, or beside the runs read"
MAKE_HINT = "give an --out outside the runs, or leave it out for a fresh folder"
KIND_SAID = {"run": "a run's config beside its records", "cascade": "a cascade: it holds "
             "cascade.json", "sweep": "a sweep: it holds sweep.json"}  # fmt: skip
# what may not be replaced by a file written in its place (a rename over it would drop it)
NOT_FILES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))  # fmt: skip


def folder_kind(folder: Path) -> str | None:
    """``"cascade"``, ``"sweep"`` or ``"run"`` where ``folder`` holds that kind's records (a
    dangling link in a record's place counts: the record is there, only damaged); else None."""
    for kind, names in MARKS:
        if all(os.path.lexists(Path(folder) / n) for n in names):
            return kind
    return None


def written_place(path: Path, file: bool) -> Path:
    """Where a write to ``path`` lands: a file's folder resolved, not a link at the file's own
    name (a page is a temp file renamed over it, which replaces the link); a folder resolved
    whole (it is made, or written into, through its links)."""
    if file:
        return Path(os.path.realpath(Path(path).parent)) / Path(path).name
    return Path(os.path.realpath(path))


def owned_folders(reads: Iterable[Path]) -> set[Path]:
    """The cascade and sweep folders the runs ``reads`` are: a cascade or sweep given, and the
    cascade and sweep folders holding a run given (its parent, and that one's parent)."""
    owned: set[Path] = set()
    for r in reads:
        real = Path(os.path.realpath(r))
        owned.update(f for f in (real, *real.parents[:2]) if folder_kind(f) in ("cascade", "sweep"))
    return owned


def arm_names(cascade: Path) -> set[str]:
    """The arms ``cascade.json`` names (those not started have no records yet: their folders
    are still theirs). A record of another shape names none; an unreadable one is its line."""
    meta = read_json(cascade / "cascade.json", "cascade.json", kind=dict)
    arms = meta.get("arms")
    return {a for a in arms if isinstance(a, str)} if isinstance(arms, list) else set()


def refuse_records(
    place: Path, what: str, reads: Iterable[Path] = (), file: bool = False, hint: str = HINT
) -> None:
    """One :class:`UserError` line where a write to ``place`` (a file with ``file``, else a
    folder) lands among records the command does not own: in or inside a run folder (a run it
    reads too), inside a cascade or sweep folder none of ``reads`` is in, or inside an arm's
    folder of a cascade it reads. ``what``: the option, for the line."""
    reads = list(reads)
    real = written_place(place, file)
    owned = owned_folders(reads)
    read_runs = {Path(os.path.realpath(r)) for r in reads}
    start = real.parent if file else real
    for folder in (start, *start.parents):
        kind = folder_kind(folder)
        if kind is None:
            continue
        where = "is" if folder == real else "is inside"
        if kind == "run":
            whose = "a run this command reads" if folder in read_runs else "another run's folder"
            raise UserError(f"{what} {place} {where} {folder}, {whose}: what is written there "
                            "would be mixed with the run's records", hint=hint)  # fmt: skip
        if folder not in owned:
            raise UserError(f"{what} {place} {where} {folder}, a {kind} folder this command "
                            "does not read: it is not its place", hint=hint)  # fmt: skip
        below = real.relative_to(folder).parts[:1]
        if kind == "cascade" and below and below[0] in arm_names(folder):
            arm = folder / below[0]
            where = "is" if arm == real else "is inside"
            raise UserError(f"{what} {place} {where} {arm}, the place of the cascade's arm "
                            f"{below[0]!r}", hint=hint)  # fmt: skip
        return  # in a cascade or sweep folder the command reads, beside the arms: its place


def cell_names(sweep: Path) -> set[str]:
    """The cells ``sweep.json`` names (written before any cell runs: their folders are the
    sweep's cells' places). A record that cannot be read, or of another shape, names none."""
    try:
        meta = read_json(sweep / "sweep.json", "the sweep's sweep.json", kind=dict)
    except UserError:  # then the folder is only a sweep's, not a cell's place: refused below
        return set()
    cells = meta.get("cells")
    return {c for c in cells if isinstance(c, str)} if isinstance(cells, list) else set()


def refuse_nested(
    out: Path, what: str = "--out", resumes: str | None = None, cell: bool = False,
    hint: str = MAKE_HINT,
) -> None:  # fmt: skip
    """One :class:`UserError` line, before anything is made, where a command that makes a
    folder of its own records would make or use ``out`` among others' (resolved: a link to a
    run is the run): ``out`` a run, cascade or sweep folder, unless of the kind ``resumes``
    (the command continues it: a sweep re-run on its ``--out``), or inside one, unless
    ``cell`` (a cascade) and ``out`` is a cell its sweep's ``sweep.json`` names."""
    real = Path(os.path.realpath(out))
    for folder in (real, *real.parents):
        kind = folder_kind(folder)
        if kind is None or (folder == real and kind == resumes):
            continue
        if cell and kind == "sweep" and folder == real.parent and real.name in cell_names(folder):
            return  # the sweep's cell: the sweep, which made its folder, was judged when made
        where = "is" if folder == real else "is inside"
        raise UserError(f"{what} {out} {where} {folder}, a run folder ({KIND_SAID[kind]}): "
                        "what is made there would be mixed with its records", hint=hint)  # fmt: skip


def replaceable(path: Path, hint: str = "move it aside, then render the page again") -> None:
    """Nothing, a regular file or a link at ``path`` (``lstat``: a link is replaced by the
    rename of a file written in its place, whatever it points at); else one
    :class:`UserError` naming what is there, which a rename would drop without a word (a FIFO,
    a socket) or fail on with the OS's words (a folder)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a name too long, a folder above it that is a file
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = next((said for test, said in NOT_FILES if test(mode)), "not a file")
    raise UserError(f"{path} is not a regular file ({kind}): refusing to replace it", hint=hint)


def refuse_unreplaceable(out: Path, names: Iterable[str]) -> None:
    """:func:`replaceable` for each file a run writes at the top of its folder ``out`` (a
    sweep's tables, a ladder's, a cascade's record and page), checked before any work: a FIFO,
    socket or folder there is one line then, not a failure after the training."""
    if os.path.isdir(out):  # a file in the folder's place is make_out_dir's line
        for name in names:
            replaceable(out / name, hint="move it aside, then re-run the same command")
