"""What a Python caller gives ``run_cascade``, ``run_sweep`` and ``run_ladder``, checked where it
is given and before any folder or file is written (``given_checks.py``'s rule, for the specs).

    CascadeSpec(clips="none")      # BadType: CascadeSpec: clips must be a list of str, got str
    configs = checked_arms(spec.base, spec.clips)   # check_config's checks, for each arm

The command line builds a spec from options it checked itself (``commands/options.checked``,
each field named by its flag, and a comma list per axis); a Python caller had only the spec's
annotations, which nothing read, and ``RunConfig.resolve``:

- ``clips="none"`` was the arms ``n, o, n, e`` ("--clip lists an arm twice: n,o,n,e"), and a
  ``str`` for ``sizes`` the size ``t``; an ``out`` given as a ``str`` was an AttributeError (a
  TypeError in a sweep), ``Path("")`` the working folder ("output directory . exists");
- a numpy number in ``lrs`` or ``seeds`` trained, then failed writing sweep.json, and a value
  listed twice trained one cell twice, counted twice in the pooled rates;
- ``mixer_sharpness=nan`` (and every other value ``config_checks.check_config`` refuses: a nan
  anywhere, an unknown clip mode, a microbatch past one forward) passed ``resolve`` and was
  refused by the data mixer or the trainer only after ``cascade.json`` (or the arm's folder)
  was written.

- ``plotly="sharde"`` (a typo of ``shared``) passed, and each page then inlined plotly.js;
  a cascade of more arms than a run directory may list (``runread.MAX_ARMS``), or a grid of
  more arms than ``sweep.csv`` may hold (``sweep_table.MAX_SWEEP_ROWS``), trained every arm
  and was then refused by the readers of its own output (the report, a resume).

A wrong type is a :class:`~andrea_diag.errors.BadType` (a ``TypeError``), a value that cannot
be used a :class:`~andrea_diag.errors.BadArgument` (a ``ValueError``); both are the CLI's one
line. The fields are named as Python names them (``mixer_sharpness``, not the flag).
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from andrea_diag.config import PRESETS, RunConfig
from andrea_diag.errors import BadArgument, BadType, UserError, unsafe
from andrea_diag.experiments.config_checks import check_config
from andrea_diag.experiments.executor_config import (
    EXECUTOR_BOUNDS,
    EXECUTORS,
    ExecutorConfig,
    unused_executor_field,
)
from andrea_diag.experiments.mps import MPS_MODES
from andrea_diag.field_types import plain_fields, plain_number, type_hints
from andrea_diag.fields import bound_problem, cli_of
from andrea_diag.given_checks import given_folder
from andrea_diag.runread import MAX_ARMS
from andrea_diag.sweep_table import MAX_SWEEP_ROWS
from andrea_diag.train.components import check_precision

# The values a spec's str field of named choices may take: the one list of each. ``plotly``:
# the pages inline plotly.js or share one copy (sweep.shared_plotly reads the mode; --plotly in
# commands/publish.py is checked against this list).
CHOICES: dict[str, tuple[str, ...]] = {"plotly": ("inline", "shared")}
# A grid's axis (a list field of a spec) and the config field each of its values sets.
AXES = {"sizes": "size", "lrs": "lr", "max_norms": "max_norm", "seeds": "seed",
        "precisions": "precision"}  # fmt: skip


def checked_spec(spec: Any, owner: str) -> None:
    """Each field of the dataclass ``spec`` (a CascadeSpec, SweepSpec or LadderSpec) as the
    type it declares, made plain in place: a list (or tuple) of str or numbers, with no value
    twice, as a list of Python's own (a numpy number as the number it holds); an ``out`` path
    as a :class:`~pathlib.Path` (a ``str`` too, through ``given_folder``: not blank, no NUL or
    control character). ``owner``: the class, as the caller wrote it, for the line."""
    hints = type_hints(type(spec))
    for f in dataclasses.fields(spec):
        value = _plain(f"{owner}: {f.name}", getattr(spec, f.name), hints[f.name])
        if f.name in CHOICES and value not in CHOICES[f.name]:  # a typo: silently inlined
            raise BadArgument(f"{owner}: {f.name} must be one of {', '.join(CHOICES[f.name])}, "
                              f"got {value!r}"[:300])  # fmt: skip
        if isinstance(value, ExecutorConfig):
            value = checked_executor(value, f"{owner}: {f.name}")
        setattr(spec, f.name, value)
    check_count(spec, owner)
    for axis in AXES.keys() & {f.name for f in dataclasses.fields(spec)}:
        check_axis(getattr(spec, axis), axis, owner)


def check_axis(values: list[Any], axis: str, owner: str) -> None:
    """Each value of a grid's ``axis`` (``lrs``, ``sizes``, ...) one its config field takes
    (the bounds and names the command line checks each comma item for), judged alone: the base
    config and the combinations are judged where the grid's cells are made, before any
    folder. Else ``lrs=[-1.0]`` or ``sizes=["huge"]`` made a spec that failed only once run."""
    name = AXES[axis]
    field = next((f for f in dataclasses.fields(RunConfig) if f.name == name), None)
    meta = cli_of(field) if field is not None and name not in ("size", "precision") else None
    for value in values:
        if name == "precision":
            check_precision(value)  # its registry's own error: UnknownPrecision, a ValueError
        elif name == "size" and value not in PRESETS:
            raise BadArgument(f"{owner}: {axis} holds an unknown size {value!r}"[:300],
                              hint=f"choose from {', '.join(PRESETS)}")  # fmt: skip
        # the field's bounds, found once per axis, not once per value
        elif meta is not None and (problem := bound_problem(meta, value)) is not None:
            raise BadArgument(f"{owner}: each of {axis} {problem}"[:300])


def checked_executor(ex: ExecutorConfig, what: str) -> ExecutorConfig:
    """``ex`` with its fields of the type they declare (a numpy number as Python's), once the
    values its own ``check`` refuses at run time and the command line refuses as options are
    refused here too, where the spec is made: an unknown kind or MPS mode, ``jobs`` outside 1
    to :data:`MAX_JOBS` (``jobs=True`` was one job, ``10**6`` a million cells in flight), a
    negative GPU count. What needs an import or the environment (submitit, a launcher) is left
    to ``check``, when the sweep runs."""
    plain = plain_fields(ex, what)
    ex = dataclasses.replace(ex, **plain) if plain else ex
    if ex.kind not in EXECUTORS:
        raise BadArgument(f"{what}: unknown kind {ex.kind!r}"[:300],
                          hint=f"choose from {', '.join(EXECUTORS)}")  # fmt: skip
    if ex.mps not in MPS_MODES:
        raise BadArgument(f"{what}: unknown mps {ex.mps!r}"[:300],
                          hint=f"choose from {', '.join(MPS_MODES)}")  # fmt: skip
    for name, (lo, hi) in EXECUTOR_BOUNDS.items():
        if not lo <= getattr(ex, name) <= hi:
            raise BadArgument(f"{what}: {name} must be from {lo} to {hi}, got {getattr(ex, name)}")
    if ex.partition is not None and (not ex.partition.strip() or unsafe(ex.partition)):
        raise BadArgument(f"{what}: partition {ex.partition!r} is blank or holds a control "
                          f"character"[:300], hint="give a Slurm partition's name, or None")  # fmt: skip
    if (unused := unused_executor_field(ex)) is not None:
        name, _, needs = unused
        raise BadArgument(f"{what}: {name} has no effect with kind {ex.kind!r}",
                          hint=f"it applies to kind {needs}; leave it unset")  # fmt: skip
    return ex


def check_count(spec: Any, owner: str) -> None:
    """Not more arms than the run's own readers take: ``clips`` at most :data:`MAX_ARMS` (a
    cascade's), and a grid's cells times its arms (the lengths of its axes, :data:`AXES`, and
    of ``clips`` multiplied: no other list is a dimension) at most :data:`MAX_SWEEP_ROWS`
    (``sweep.csv``'s rows). Past either every arm trained, then the report (and a resume)
    refused the run's own files as damaged."""
    clips = getattr(spec, "clips", [])
    if len(clips) > MAX_ARMS:
        raise BadArgument(f"{owner}: clips lists {len(clips):,} arms, more than a cascade runs "
                          f"({MAX_ARMS:,})", hint="give fewer arms")  # fmt: skip
    arms = 1
    for name in [*AXES, "clips"]:
        value = getattr(spec, name, None)
        arms *= len(value) if isinstance(value, list) else 1
    if arms > MAX_SWEEP_ROWS:
        raise BadArgument(
            f"{owner}: the grid is {arms:,} arms (cells times clips), more than a sweep runs "
            f"({MAX_SWEEP_ROWS:,})",
            hint="give fewer values per axis, or split the grid into several sweeps",
        )


def _plain(what: str, value: Any, hint: Any) -> Any:
    """``value`` as the field ``what`` annotated ``hint`` holds it, or one error naming it."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        return _plain_list(what, value, args[0])
    if Path in args:  # out: Path | None
        return None if value is None else given_folder(value, what)
    if hint is bool and not isinstance(value, bool):
        raise BadType(f"{what} must be True or False, got {type(value).__name__} {value!r}")
    if isinstance(hint, type) and not isinstance(value, hint):  # base, executor, plotly
        raise BadType(f"{what} must be a {hint.__name__}, got {type(value).__name__}")
    return value


def _plain_list(what: str, value: Any, kind: type) -> list[Any]:
    """A list (or tuple) of ``kind`` (str, int or float), not empty, no item twice."""
    if isinstance(value, str):  # a str is a sequence of str: "none" was four arms
        raise BadType(f"{what} must be a list of {kind.__name__}, got str {value!r}",
                      hint=f"pass a list: {what.rpartition(' ')[2]}=[{value!r}]")  # fmt: skip
    if _array_1d(value) or isinstance(value, range):  # np.logspace(-4, -2, 3), range(3)
        value = list(value)
    if not isinstance(value, (list, tuple)):  # a set has no order, a generator is used up
        raise BadType(f"{what} must be a list of {kind.__name__}, got {type(value).__name__}")
    items = [_item(what, v, kind) for v in value]
    if not items:
        raise BadArgument(f"{what} is empty", hint="give at least one value")
    seen: set[Any] = set()  # a set, not items[:i]: 100,000 seeds took minutes to compare
    for item in items:
        if item in seen:  # 1e-3 and 0.001 are one cell: it would train twice
            raise BadArgument(f"{what} lists {item!r} twice", hint="give each value once")
        seen.add(item)
    return items


def _array_1d(value: Any) -> bool:
    """A one-dimensional array (numpy's, or any with its ``ndim``/``tolist``): a list of values
    to a caller; ``sizes``'s strs and the numbers alike are checked item by item after."""
    return getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None))


def _item(what: str, value: Any, kind: type) -> Any:
    """One item of a list of ``kind``: a str, or a number (not a bool) as Python's own
    (field_types' rule for a config's numbers: np.float32(1e-3) as a float, JSON takes no
    numpy)."""
    if kind is str:
        plain = value if isinstance(value, str) else None
    else:
        plain = plain_number(value, kind)
    if plain is None:
        raise BadType(f"{what} must be a list of {kind.__name__}, got an item of "
                      f"{type(value).__name__} {value!r}"[:300])  # fmt: skip
    return plain


@contextlib.contextmanager
def _as_python_error() -> Iterator[None]:
    """A plain :class:`UserError` from the config's checks as a :class:`BadArgument` (also a
    ``ValueError``); one that already is a ``ValueError`` or ``TypeError`` (an unknown
    precision or clip mode, a bound) passes as it is."""
    try:
        yield
    except UserError as e:
        if isinstance(e, (ValueError, TypeError)):
            raise
        raise BadArgument(e.message, e.hint) from None


def checked_arms(base: RunConfig, clips: list[str]) -> list[RunConfig]:
    """Each arm's config (``base`` with the arm's clip mode), resolved once it passes
    :func:`~andrea_diag.experiments.config_checks.check_config`: what the command line's
    options and a saved config pass, for a Python caller, before anything is written."""
    configs = []
    for clip in clips:
        with _as_python_error():
            cfg = dataclasses.replace(base, clip=clip, arm=clip)
            configs.append(check_config(cfg, name=lambda field: field))
    return configs
