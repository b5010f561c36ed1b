"""``andrea-diag report RUN_DIR...``: re-render the HTML report from run directories."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from andrea_diag.commands.given import plain_out, typed_path
from andrea_diag.console_text import make_console, shell_word, shown
from andrea_diag.errors import UserError, unsafe, visible
from andrea_diag.out_place import refuse_records
from andrea_diag.rundir import check_path

console = make_console(stderr=True)


def say(line: str) -> None:
    """One line of rich markup whose names went through :func:`shown`, unwrapped (a path
    stays one line to copy) and unhighlighted."""
    console.print(line, highlight=False, soft_wrap=True)


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            parser=typed_path,
            help="Run directories (from train/cascade/monitor), or a cascade directory.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            parser=typed_path,
            help="One HTML page comparing every run given (labels prefixed by each run's "
            "folder), written here: never inside a run, nor in a cascade or sweep folder "
            "it does not read, nor over a cascade's or sweep's own page or a file that is "
            "not an HTML page.",
            show_default="each run's own report.html, inside it",
        ),
    ] = None,
    title: Annotated[
        str | None,
        typer.Option(help="Report title.", show_default="andrea-diag report: <the arms' names>"),
    ] = None,
    png: Annotated[
        bool,
        typer.Option(
            "--png",
            help="Also write each chart as a PNG beside the HTML (needs kaleido and "
            "Chrome/Chromium: the `figures` extra).",
        ),
    ] = False,
    svg: Annotated[
        bool, typer.Option("--svg", help="Also write each chart as an SVG beside the HTML.")
    ] = False,
) -> None:
    """Render self-contained HTML reports (they work offline) of run or cascade directories.

    Without --out, every directory given gets its own report, written inside it
    (DIR/report.html): `report runs/cascade-tiny-*/` renders each cascade on its own page.
    With --out, one page compares all of them, each arm labelled with its run's folder name
    (cascade-a/none, cascade-b/none) and drawn in its own colour. Unfinished runs render too,
    under a box saying where and why each arm stopped. Run directories are read as untrusted
    input (nothing in them runs or escapes)."""
    images = [fmt for fmt, on in (("png", png), ("svg", svg)) if on]
    for d in [*run_dirs, *([out] if out is not None else [])]:
        check_path(d)
    plain_out(out)  # a control character in the page's name, as a run's --out
    for d in run_dirs:
        if not d.exists():
            raise UserError(f"{d} does not exist")
    given_once(run_dirs)  # R and R/ (or a link to R): one page would draw every arm twice
    if out is not None and len(run_dirs) == 1 and _written(out) == _written(_own(run_dirs[0])):
        out = None  # the very file the command writes without --out: the same page, there
    if out is not None and len(run_dirs) == 1 and _is_sweep(run_dirs[0]):
        raise UserError(  # it was dropped without a word: the pages went inside the sweep
            f"--out is for run and cascade pages; a sweep's pages are written inside it "
            f"({run_dirs[0] / 'sweep.html'})",
            hint="drop --out, or pass cells of the sweep to compare them on one page",
        )
    if title is not None:
        _check_title(title)
    if title is not None and out is None:
        _refuse_unused_title(run_dirs)
    with damaged_run_dir(run_dirs):
        if out is not None:
            _said(_render(run_dirs, out, title, images), images)
            return
        for d in run_dirs:  # each its own page, inside it (e.g. a shell glob of cascades)
            if _is_sweep(d):
                _sweep_pages(d, images)
            else:
                _said(_render([d], None, title, images), images)
        if len(run_dirs) > 1:
            given = " ".join(shell_word(d) for d in run_dirs)
            say(f"one page comparing them: andrea-diag report {given} --out compare.html")


def _is_sweep(d: Path) -> bool:
    return _holds(d, "sweep.json")


def _holds(d: Path, record: str) -> bool:
    """``d`` has an entry at ``record``: a dangling link or a loop there counts, so its reader
    names the broken file, where ``exists()`` read the folder as a run with no config.json."""
    return os.path.lexists(d / record)


def _check_title(title: str) -> None:
    """A blank --title made an empty heading, and a pasted newline or ESC was written into the
    page as it was (``report`` judges its own blanks: cli.OwnBlanks)."""
    if not title.strip():
        raise UserError("--title is empty", hint="give the page a title, or drop --title")
    if unsafe(title):
        raise UserError(f"--title '{visible(title)}' holds control characters",
                        hint="give the title as one line of plain text")  # fmt: skip


def _refuse_unused_title(run_dirs: list[Path]) -> None:
    """``--title`` without ``--out`` for a cascade or a sweep: their own pages keep their own
    titles, so it was dropped without a word (a run's own page takes it)."""
    for d in run_dirs:
        kind = "sweep" if _is_sweep(d) else "cascade" if _holds(d, "cascade.json") else None
        if kind:
            raise UserError(
                f"--title is not used for a {kind}'s own page ({d}), which keeps its own title",
                hint="drop --title, or add --out compare.html: one page of them with that title",
            )


def _sweep_pages(sweep: Path, images: list[str]) -> None:
    """A sweep's own page (and a ladder's, with today's statistics), inside the sweep."""
    from andrea_diag.commands.pages import rejudge_ladder
    from andrea_diag.report.sweep_dir import render_sweep_dir

    if images:  # the sweep page's charts are not exported (yet): say so first
        raise UserError(
            "--png/--svg draw the charts of run and cascade reports, not of the sweep page",
            hint=f"pass one cell, e.g. andrea-diag report --png {sweep}/<cell>",
        )
    say(f"[bold green]sweep:[/] {shown(render_sweep_dir(sweep))}")
    ladder = rejudge_ladder(sweep, console)
    if ladder is not None:
        say(f"[bold green]ladder:[/] {shown(ladder)}")


def _same(d: Path) -> Path:
    return d.resolve()


def _own(d: Path) -> Path:
    """A run's (or cascade's) own page, where ``report DIR`` writes it."""
    return d / "report.html"


def _written(path: Path) -> Path:
    """The file a write to ``path`` replaces: its folder's links followed, not a link at
    ``path`` itself (the write is temp file + rename, which replaces that link)."""
    return Path(os.path.realpath(path.parent)) / path.name


def given_once(run_dirs: list[Path], hint: str = "give each run once") -> None:
    """Each run once, after resolving paths (``R``, ``R/``, ``./R`` and a link to R are one)."""
    seen: dict[Path, Path] = {}
    for d in run_dirs:
        first = seen.setdefault(_same(d), d)
        if first is not d:
            both = str(d) if str(first) == str(d) else f"{first} and {d}"
            raise UserError(f"the same run directory was given twice: {both}", hint=hint)


# the pages a cascade, sweep or ladder folder holds: `report DIR` writes them again, but a
# comparison written over one would be taken for it
FOLDER_PAGES = ("report.html", "sweep.html", "ladder.html")
HTML_START = (b"<!doctype html", b"<html")


def _record_folders(d: Path) -> list[Path]:
    """``d`` and the folders above it that hold records: a cascade (``cascade.json``) and
    its sweep (``sweep.json``)."""
    records = ("cascade.json", "sweep.json")
    up = [_same(d), *_same(d).parents[:2]]
    return [a for a in up if any((a / r).exists() for r in records)]


def _is_page(path: Path) -> bool:
    """An HTML page (a regular file whose first bytes say so), which a report may replace."""
    if not path.is_file():  # a FIFO, a folder, a dangling link: never written over
        return False
    with open(path, "rb") as f:
        return f.read(64).lstrip().lower().startswith(HTML_START)


def _outside_runs(out: Path, run_dirs: list[Path]) -> None:
    """``--out`` may not land inside a run (an arm) this report reads: beside its records it
    would be taken for one, over them it would replace them. Nor inside any other run, an arm
    of the cascade not started yet, or a cascade or sweep folder none of the runs is in
    (:func:`~andrea_diag.out_place.refuse_records`). In the cascade or sweep folder holding
    the runs a new page is fine, but not one of that folder's own pages. Nor may it
    replace a file that is not an HTML page (``--out C/cascade.json``, a misspelt
    ``--out data.parquet``: that file would be lost)."""
    real = _written(out)
    folders = {a for d in run_dirs for a in _record_folders(d)}
    arms = [d for d in run_dirs if _same(d) not in folders]
    pages = {_written(_own(d)) for d in arms} | {f / n for f in folders for n in FOLDER_PAGES}
    if real in pages:
        raise UserError(f"--out {out} is a run's own report",
                        hint="write the comparison elsewhere, e.g. --out compare.html")  # fmt: skip
    for d in arms:
        if _same(d) in real.parents:
            raise UserError(
                f"--out {out} is inside {d}, a run this report reads",
                hint="write the page outside the runs, e.g. --out compare.html (without "
                "--out, each run gets its own report.html)",
            )
    # nor inside a sibling arm, another run, or a cascade or sweep none of the runs is in
    refuse_records(out, "--out", reads=run_dirs, file=True)
    if os.path.lexists(real) and not _is_page(real):
        raise UserError(
            f"--out {out} exists and is not an HTML page: the report would replace it",
            hint="name a new file or an existing page, e.g. --out compare.html",
        )


def _render(run_dirs: list[Path], out: Path | None, title: str | None, images: list[str]) -> Path:
    """The report of ``run_dirs``: a cascade's own page (one cascade, no ``out``), a run's own
    page, or one page comparing every arm of them, written to ``out``."""
    from andrea_diag.record import read_cascade_meta
    from andrea_diag.report import render_cascade, render_report
    from andrea_diag.rundir import child

    expanded: list[Path] = []
    for d in run_dirs:
        if _holds(d, "cascade.json"):
            if len(run_dirs) == 1 and out is None:
                return render_cascade(d, images=images)
            arms = [str(a) for a in read_cascade_meta(d)["arms"]]  # names checked there
            expanded += [child(d, a) for a in arms if (child(d, a) / "config.json").exists()]
        else:
            expanded.append(d)
    if not expanded:  # cascade dirs none of whose arms started: say so, not IndexError
        raise UserError(
            f"no run directory (with a config.json) in {', '.join(map(str, run_dirs))}",
            hint="no arm of these cascades started; nothing was recorded to report",
        )
    target = out or (run_dirs[0] / "report.html")  # inside the run, never beside it
    if target.is_dir():
        raise UserError(f"--out {target} is a directory", hint="give a file name, e.g. report.html")
    if out is not None:
        # a cascade and one of its arms: that arm drawn twice
        given_once(expanded, hint="a cascade given brings its arms: give the cascade or them")
        _outside_runs(out, [*run_dirs, *expanded])
    return render_report(expanded, target, title=title, images=images)


@contextlib.contextmanager
def damaged_run_dir(run_dirs: list[Path], doing: str = "render") -> Iterator[None]:
    """A run dir whose files hold what no loader expected (runread.py checks the fields the
    report uses; this catches the rest): one line naming it, never a traceback. ``doing``:
    what the command was doing with it (``render``, ``export``), for that line."""
    try:
        yield
    except UserError:  # its own line (a BadArgument is a ValueError too: not damage)
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        where = ", ".join(map(str, run_dirs))
        raise UserError(
            f"cannot {doing} {where}: it holds data of an unexpected shape ({type(e).__name__})",
            hint="the run directory is damaged or from an incompatible version",
        ) from None
    except OSError as e:
        raise UserError(f"cannot read or write {e.filename or where_of(run_dirs)}: "
                        f"{e.strerror or e}") from None  # fmt: skip


def where_of(run_dirs: list[Path]) -> str:
    return ", ".join(map(str, run_dirs))


def _said(path: Path, images: list[str]) -> None:
    """Print the page, and where its images went, each on one line (:func:`shown`)."""
    say(f"[bold green]report:[/] {shown(path)}")
    for fmt in images:
        where = shown(f"{path.with_name(path.stem)}-<chart>.{fmt}")
        say(f"[bold green]{fmt}:[/] {where}")
