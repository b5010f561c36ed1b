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

- (round 31) a spec's base config was checked only when run, a grid's at every cell (200,000
  ``check_config`` calls for the largest); a base field the spec sets per arm or cell
  (``base.lr`` in a sweep, ``base.clip``) was silently replaced; ``resume=True`` with no
  ``out`` looked for a run in ``runs/cascade-<now>``. Each is refused when the spec is made.

A wrong type is a :class:`~andrea_diag.errors.BadType` (a ``TypeError``), a value that cannot
be used a :class:`~andrea_diag.errors.BadArgument` (a ``ValueError``); both are the CLI's one
line. The fields are named as Python names them (``mixer_sharpness``, not the flag).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from andrea_diag.clip.modes import CLIPPERS
from andrea_diag.clip_params import MODE_PARAMS
from andrea_diag.config import PRESETS, RunConfig
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.experiments.config_checks import check_config
from andrea_diag.experiments.executor_config import ExecutorConfig, check_settings
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
    if getattr(spec, "resume", False) and spec.out is None:  # it continued runs/cascade-<now>
        raise BadArgument(f"{owner}: resume=True continues the run in out, and out is None",
                          hint="give out (the run's folder), or resume=False")  # fmt: skip
    check_base_fields(spec, owner)
    check_arm_configs(spec)  # first: each clip mode registered
    check_spec_clip_settings(spec, owner)


def check_clip_settings(
    arms: list[str], given: set[str], head: str, clips: str, name: Callable[[str], str]
) -> None:
    """A clip setting given (``given``: field names) that no arm reads: ``max_norm`` with no
    global or per-tensor arm (none and the adaptive modes measure with their own rule), an
    adaptive mode's parameter (``zclip_z``) with no arm of that mode. The one owner: the
    command line names each by its flag (``--max-norm``, what was typed) and the arms by
    ``--clip``; a spec by its field (what differs from the default), after ``head``. Set, it
    was silently unread (a sweep's ``max_norms=[0.5, 1.0]`` of arm none trained one cell twice)."""
    shown = ",".join(arms)[:200]  # up to 1,000 arms: the line names the first ones
    if "max_norm" in given and all(CLIPPERS[a].kernel_mode == "none" for a in arms):
        raise BadArgument(
            f"{head}{name('max_norm')} is used by {clips} global or per-tensor only, not {shown}",
            hint=f"drop {name('max_norm')}, or add a global or per-tensor arm",
        )
    for mode, params in MODE_PARAMS.items():
        unused = [f.name for f in dataclasses.fields(params) if f.name in given]
        if unused and mode not in arms:
            raise BadArgument(
                f"{head}{name(unused[0])} is used by {clips} {mode} only, not {shown}",
                hint=f"drop {name(unused[0])}, or add a {mode} arm",
            )


def check_spec_clip_settings(spec: Any, owner: str) -> None:
    """:func:`check_clip_settings` for a spec: the clip settings it sets other than their
    defaults (a field of its base's ``clip_params``; ``max_norm``, or a grid's ``max_norms``
    other than the default's one value), named as Python names them. A resumed cascade keeps
    its own settings: a run made before this rule still continues."""
    if getattr(spec, "resume", False):
        return
    params = spec.base.clip_params
    given = {f.name for f in dataclasses.fields(params) if getattr(params, f.name) != f.default}
    norms = getattr(spec, "max_norms", [spec.base.max_norm])
    if norms != [_DEFAULTS["max_norm"]]:
        given.add("max_norm")
    norm = "max_norms" if hasattr(spec, "max_norms") else "base.max_norm"
    named = lambda f: norm if f == "max_norm" else f"base.clip_params.{f}"  # noqa: E731
    check_clip_settings(spec.clips, given, f"{owner}: ", "clips", named)


# The base config's fields the spec sets for each arm or cell, and the spec's list that sets it.
SET_BY = {"clip": "clips", "arm": "clips", **{name: axis for axis, name in AXES.items()}}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def check_base_fields(spec: Any, owner: str) -> None:
    """Each field of ``spec.base`` that the spec sets per arm or cell (:data:`SET_BY`: the clip
    mode and arm label by ``clips``, a grid's size, lr, ... by its axis) at its default or one
    of the spec's values for it: else it was silently replaced
    (``SweepSpec(base=RunConfig(lr=5e-2))`` ran the default lrs, ``CascadeSpec(base=
    RunConfig(clip="zclip"))`` the arms none and global). The command line's base holds the
    defaults, or a grid's first size and precision (``commands/run.grid_base``)."""
    for name, listed in SET_BY.items():
        values, given = getattr(spec, listed, None), getattr(spec.base, name)
        if values is not None and given != _DEFAULTS[name] and given not in values:
            each = "arm" if listed == "clips" else "cell"
            raise BadArgument(f"{owner}: base.{name} {given!r} is not one of {listed}: each "
                              f"{each}'s {name} is set by {listed}"[:300],
                              hint=f"add it to {listed}, or leave base.{name} at its default "
                              f"({_DEFAULTS[name]!r})")  # fmt: skip


def check_arm_configs(spec: Any) -> None:
    """Every arm's config the spec makes passes :func:`checked_arms` (``check_config``'s
    checks), when the spec is made and again at run time, for a field set since: a cascade's
    base with each of its clips; a grid's at each of its sizes, the other axes at their first
    value. ``check_config`` reads an lr, max_norm, seed or precision only alone (its bounds,
    its registry), what :func:`check_axis` judged for every value already; a size changes what
    else it reads (the preset's updates, batch and block), so each size is checked whole. Before,
    a nan or an unknown clip mode in a spec's base was refused only by the run."""
    sizes = getattr(spec, "sizes", None)
    if sizes is None:  # a cascade: its base, as given
        checked_arms(spec.base, spec.clips)
        return
    first = {AXES[axis]: getattr(spec, axis)[0] for axis in AXES if axis != "sizes"}
    for size in sizes:
        checked_arms(dataclasses.replace(spec.base, **first, size=size), spec.clips)


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
    """``ex`` with its fields of the type they declare (a numpy number as Python's), once its
    settings pass :func:`~andrea_diag.experiments.executor_config.check_settings` (named for
    ``what``): ``ex`` passed them when made, but a field may have been set since
    (``spec.executor.jobs = 0``). What needs an import or the environment (submitit, a
    launcher) is left to ``check``, when the sweep runs."""
    plain = plain_fields(ex, what)
    check_settings({**vars(ex), **plain}, owner=what)  # before replace: named for the spec
    return dataclasses.replace(ex, **plain) if plain else ex


def check_count(spec: Any, owner: str) -> None:
    """Not more arms than the run's own readers take (:func:`check_counts`): ``clips`` at
    most :data:`MAX_ARMS` (a cascade's), and a grid's cells times its arms (the lengths of its
    axes, :data:`AXES`, and of ``clips``: no other list is a dimension) at most
    :data:`MAX_SWEEP_ROWS` (``sweep.csv``'s rows). Past either every arm trained, then the
    report (and a resume) refused the run's own files as damaged."""
    lengths = {name: len(value) for name in [*AXES, "clips"]
               if isinstance(value := getattr(spec, name, None), list)}  # fmt: skip
    check_counts(lengths, clips=f"{owner}: clips", grid=f"{owner}: the grid")


def check_counts(
    lengths: dict[str, int], clips: str, grid: str, counted: str = " (cells times clips)"
) -> None:
    """The one owner of the arm-count limits' comparisons, for a spec (:func:`check_count`) and
    for the command line before it parses a value (``commands/run.py``). ``lengths``: each
    list's length by the spec's field name (``clips`` and the axes of :data:`AXES`); ``clips``
    and ``grid``: how the line names them (``SweepSpec: clips``, or the flag ``--clip``)."""
    if (n := lengths.get("clips", 1)) > MAX_ARMS:
        raise BadArgument(f"{clips} lists {n:,} arms, more than a cascade runs ({MAX_ARMS:,})",
                          hint="give fewer arms")  # fmt: skip
    if (arms := math.prod(lengths.values())) > MAX_SWEEP_ROWS:
        raise BadArgument(
            f"{grid} is {arms:,} arms{counted}, more than a sweep runs ({MAX_SWEEP_ROWS:,})",
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
        article = "an" if hint.__name__[0] in "AEIOU" else "a"  # an ExecutorConfig
        raise BadType(f"{what} must be {article} {hint.__name__}, got {type(value).__name__}")
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
