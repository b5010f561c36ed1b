"""The ``andrea-diag`` command line: typer wiring only; every command calls library code.

andrea-diag cascade --size tiny            # clipped vs unclipped arms + HTML report
andrea-diag train --size 12m --clip none   # one arm
andrea-diag report runs/cascade-tiny-*/    # re-render a report
andrea-diag bench-kernels                  # clipper benchmarks (GPU, or CPU paths)
andrea-diag bench-train                    # the training engine against a plain loop
andrea-diag accum-check                    # accumulation loop vs full batch, and the mistakes
andrea-diag doctor                         # what this machine can run
andrea-diag ladder --seed 0,1,2            # where clipping becomes mandatory, 12m..120m
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from andrea_diag import __version__
from andrea_diag.commands.accum_check import accum_check
from andrea_diag.commands.bench_kernels import bench_kernels
from andrea_diag.commands.bench_train import bench_train
from andrea_diag.commands.doctor import doctor
from andrea_diag.commands.errors import err_console, friendly_errors, one_line
from andrea_diag.commands.export import export
from andrea_diag.commands.ladder import ladder
from andrea_diag.commands.options import plain_number
from andrea_diag.commands.report import report
from andrea_diag.commands.run import cascade, sweep, train
from andrea_diag.console_text import shown
from andrea_diag.errors import UserError

# click's UsageError, the parent of every parse error: typer re-exports only BadParameter, and
# newer typers vendor click (typer._click), so it is found from there rather than imported
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _Flags:
    """Help and parsing shared by the app and its commands.

    - A flag (``--shadow/--no-shadow``, ``--png``, ``--help``) takes no value, so its help row
      shows no ``<bool>`` type.
    - A value typer cannot read (``--seed abc``, ``--reps 10**12`` past its bound) ends in the
      same one line as every other user error (``commands/errors.py``), not a usage panel.
    - The text typed is checked before typer converts it, where the conversion would hide a
      mistake: an empty value (``--out ""`` is the current folder, ``--model ""`` no model at
      all) and a number that int() or float() read only by their own extensions (``1_0``,
      another script's digits).
    - An option that takes a comma list (:data:`LISTS`), given twice, is said in one warning
      line: click keeps the last one without a word, so ``cascade --clip global --clip none``
      ran the one arm ``none`` and ``sweep --lr 1e-3 --lr 1e-2`` a grid of one lr. The last
      one still counts: a base command line with an override after it is a use (the tests'
      ``[*SWEEP, "--lr", "1e-3,3e-3"]``), as for every other option.
    """

    refuse_blank = True  # False: the command's own module judges an empty value

    def _check_typed(self, ctx: Any, args: list[str]) -> None:
        try:
            typed, _, order = self.make_parser(ctx).parse_args(args=list(args))  # type: ignore[attr-defined]
        except Exception:  # a usage error: the parse proper says it, in its own words
            return
        _warn_repeated(order, LISTS.get(ctx.info_name, ()), typed)
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            raw = typed.get(param.name)
            texts = raw if isinstance(raw, (list, tuple)) else [raw]
            flag = next((o for o in param.opts if o.startswith("--")), param.name)
            kind = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            for text in (t for t in texts if isinstance(t, str)):  # a flag's value is a bool
                if self.refuse_blank and not text.strip():
                    raise UserError(f"{flag} is empty", hint="give it a value, or leave it out")
                if kind in (int, float):
                    plain_number(text, kind, flag)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if getattr(param, "is_flag", False):
                param.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            if not ctx.resilient_parsing:  # shell completion parses half-typed lines
                self._check_typed(ctx, args)
            return super().parse_args(ctx, args)  # type: ignore[misc]
        except _USAGE_ERROR as e:  # a bad value, a bound, a missing argument (BadParameter)
            # or an unknown option, an extra argument: one line too, not click's usage panel
            hint = None if isinstance(e, typer.BadParameter) else f"see {ctx.command_path} --help"
            one_line(UserError(e.format_message().replace("\n", " "), hint=hint))
            raise typer.Exit(2) from None
        except UserError as e:
            one_line(e)
            raise typer.Exit(e.exit_code) from None


# Each command's options that take a comma list: given twice, the user may have meant one
# list of both (--inject and --source beside them are repeatable), and the last one alone ran.
_GRID = ("size", "lr", "max_norm", "seed", "clip", "precision")
LISTS = {"cascade": ("clip",), "sweep": _GRID, "ladder": _GRID,
         "bench-kernels": ("sizes", "dtypes", "cases")}  # fmt: skip


def _warn_repeated(order: list[Any], lists: tuple[str, ...], typed: dict[str, Any]) -> None:
    """One warning line for an option of ``lists`` (parameter names) given more than once
    (``order``: the parser's parameters, once per time each was typed; ``typed``: the values
    that count, the last of each); none with ``--help`` (eager: it ends the command first)."""
    if any(getattr(p, "is_eager", False) for p in order):
        return
    named = [p for p in order if getattr(p, "name", None) in lists]
    twice = next((p for i, p in enumerate(named) if p in named[:i]), None)
    if twice is not None:
        flag = next(o for o in twice.opts if o.startswith("--"))
        err_console.print(
            f"[yellow]warning:[/] {flag} is given {named.count(twice)} times: only the last, "
            f"{shown(typed.get(twice.name))}, counts (for several values, give one comma list)",
            highlight=False,
            soft_wrap=True,
        )


class Command(_Flags, TyperCommand):
    pass


class OwnBlanks(Command):
    """``report`` and ``export``: whether an empty value means something is left to their own
    modules (commands/report.py, export.py); the number check applies as everywhere."""

    refuse_blank = False


class Group(_Flags, TyperGroup):
    pass


app = typer.Typer(
    cls=Group,
    name="andrea-diag",
    help="Diagnose and benchmark transformer training stability: clipped vs unclipped arms "
    "under bandit phase switches, spike attribution, Adam-state pollution, lock-in, and a "
    "fused CUDA clipper.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"andrea-diag {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """andrea-diag: does this run need clipping, where do spikes come from, what does it cost."""


# how to go on after Ctrl-C or a signal, for the commands that record work to continue
AFTER_STOP = {
    "cascade": "continue with --resume DIR", "train": "continue with --resume DIR",
    "sweep": "run the same command again to continue", "ladder": "run the same command again to continue",
    "bench-kernels": "each set timed before the stop is in --out's bench-kernels.json (meta.partial)",
}  # fmt: skip

for _name, _fn in {
    "cascade": cascade, "train": train, "sweep": sweep, "report": report,
    "bench-kernels": bench_kernels, "bench-train": bench_train, "accum-check": accum_check,
    "doctor": doctor, "ladder": ladder, "export": export,
}.items():  # fmt: skip
    _cls = OwnBlanks if _name in ("report", "export") else Command
    app.command(_name, cls=_cls)(friendly_errors(_fn, AFTER_STOP.get(_name)))

if __name__ == "__main__":
    app()
