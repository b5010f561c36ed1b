"""Where a cascade's folder may be, checked before any work (one owner for both ways in).

    check_fresh(out)                 # cascade/train --out: absent or empty, in no other run
    check_resumed(out, main=True)    # --resume: a cascade, in no other run, no FIFO at its files

A cascade continued in place (``--resume``) is held to the rules a new one is
(``out_place.refuse_nested``): ``cascade --resume C/none/inner`` trained inside the arm ``none``
of another cascade. What lies at the names of its own files is checked too: a folder at
``report.html`` failed the command after the training, with the page's hint.
"""

from __future__ import annotations

from pathlib import Path

from andrea_diag.errors import BadArgument
from andrea_diag.out_place import refuse_nested, refuse_unreplaceable
from andrea_diag.record import read_cascade_meta
from andrea_diag.rundir import check_path

# the files a cascade writes at the top of its folder (the arms' own are checked per arm)
CASCADE_FILES = ("cascade.json", "batch_plan.json", "report.html")


def check_resumed(out_dir: Path, main: bool) -> None:
    """The folder ``--resume`` continues: a cascade (not made by the lock taken next), in no
    other run's folder but its sweep's, and no FIFO or folder where it writes its own files."""
    read_cascade_meta(out_dir)
    if main:  # rank 0 alone writes
        refuse_nested(out_dir, "--resume", resumes="cascade", cell=True,
                      hint="move the cascade out of the other run's folder, then resume it")  # fmt: skip
        refuse_unreplaceable(out_dir, CASCADE_FILES)


def check_fresh(out_dir: Path) -> None:
    """The folder a new cascade makes: absent or empty, and in no other run's folder but as a
    cell its sweep names. One line each, before anything is made."""
    check_path(out_dir, "--out")
    try:  # a path the system cannot look up (too long in all) is one line, as in make_out_dir
        taken = out_dir.exists() and not out_dir.is_dir()
        full = not taken and out_dir.exists() and any(out_dir.iterdir())
    except OSError as e:
        raise BadArgument(f"cannot use --out {out_dir}: {e.strerror or e}") from None
    if taken:
        raise BadArgument(f"--out {out_dir} is a file, not a directory")
    if full:  # "." is also what Path("") is (an unset variable): say which folder that is
        here = " (the working folder)" if out_dir == Path() else ""
        raise BadArgument(
            f"output directory {out_dir}{here} exists and is not empty",
            hint="choose another --out; nothing was overwritten",
        )
    refuse_nested(out_dir, "--out", cell=True)  # not inside another run, nor a sweep's but a cell
