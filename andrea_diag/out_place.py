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
"""

from __future__ import annotations

import os
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
