"""The options that ``cascade``, ``train``, ``sweep`` and ``ladder`` share, generated from the config.

    @run_options(one_cell=True)
    def cascade(clip: ..., *, run: RunArgs) -> None:
        base = checked(run.config)

Every field of :class:`~andrea_diag.config.RunConfig`, :class:`~andrea_diag.config.ProbeConfig`
and :class:`~andrea_diag.clip_params.ClipParams` declared with ``fields.option`` becomes a typer
option: its flag, help, default and bounds are read from the field, so the CLI restates none of
them. ``run_options`` appends those options to a command's signature and hands the command the
(unresolved) ``RunConfig`` they make, plus ``--out``, ``--resume`` and what the user typed.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import typer
from rich.markup import escape

from andrea_diag.clip_params import MODE_PARAMS, ClipParams
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.data.corpus import parse_source_overrides
from andrea_diag.errors import OutOfRange, UserError, visible
from andrea_diag.experiments.config_checks import check_config
from andrea_diag.fields import POSITIVE_RANGE, Cli, cli_fields, cli_of
from andrea_diag.integrations.hf_model import read_config
from andrea_diag.rundir import check_path
from andrea_diag.train.components import precision_help

# The config's nested dataclasses whose CLI fields are options too, and their help panels.
NESTED: dict[str, tuple[type, str | None]] = {
    "probes": (ProbeConfig, None),
    "clip_params": (ClipParams, f"Adaptive clip modes (--clip {','.join(MODE_PARAMS)})"),
}
# What a typed value becomes in the config, where the option's type is not the field's.
CONVERT: dict[str, Callable[[Any], Any]] = {
    "sources": lambda v: _source_overrides(v),
    "inject": lambda v: list(v or []),
    "hf_config": lambda v: _utf8_or_none(v, "--hf-config"),
}
# Fields whose value names a registered class: the registry (not the torch-free config) gives
# their help (and checks them: experiments/config_checks.REGISTERED), so a new precision is one class and
# one @register_precision.
REGISTRIES: dict[str, Callable[[], str]] = {"precision": precision_help}


@dataclass(frozen=True)
class ConfigOption:
    """One config field as a command-line option."""

    name: str  # the field's name, which is also the typer parameter's
    nested: str | None  # None: a RunConfig field; else the RunConfig field holding it ("probes")
    type: Any  # the field's resolved type hint
    default: Any
    cli: Cli
    panel: str | None

    @property
    def flag(self) -> str:
        return self.cli.flag(self.name)

    def get(self, cfg: RunConfig) -> Any:
        return getattr(getattr(cfg, self.nested) if self.nested else cfg, self.name)

    def annotation(self, default: Any) -> Any:
        shown = self.cli.shown if default is None and self.cli.shown else True
        opt = typer.Option(
            *self.cli.flags, help=escape(self.cli.help), show_default=shown,
            rich_help_panel=self.cli.panel or self.panel,
        )  # fmt: skip
        return Annotated[_cli_type(self.type), opt]


def _cli_type(hint: Any) -> Any:
    """The option's type: Literal -> str, a dict or list field -> a repeatable ``list[str]``."""
    if get_origin(hint) in (list, dict):
        return list[str] | None
    args = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    base = next(a for a in args if a is not type(None))
    if get_origin(base) is Literal:
        base = str
    return base | None if type(None) in args else base


def _options() -> list[ConfigOption]:
    """Every CLI field, in RunConfig's order, a nested config's fields where it sits."""
    out: list[ConfigOption] = []
    hints = get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        if f.name in NESTED:
            cls, panel = NESTED[f.name]
            sub = get_type_hints(cls)
            out += [ConfigOption(g.name, f.name, sub[g.name], _default(g), m, panel)
                    for g, m in cli_fields(cls)]  # fmt: skip
        elif (meta := cli_of(f)) is not None:
            if f.name in REGISTRIES:
                meta = dataclasses.replace(meta, help=REGISTRIES[f.name]())
            out.append(ConfigOption(f.name, None, hints[f.name], _default(f), meta, None))
    return out


def _default(f: dataclasses.Field) -> Any:
    return None if f.default is dataclasses.MISSING else f.default  # a list or dict: none typed


OPTIONS: list[ConfigOption] = _options()
BY_NAME = {o.name: o for o in OPTIONS}
assert not {f.name for f in dataclasses.fields(RunConfig)} & {
    f.name for cls, _ in NESTED.values() for f in dataclasses.fields(cls)
}, "a nested config field shadows a RunConfig field: their options would collide"

Out = Annotated[
    Path | None, typer.Option(help="Output directory.", show_default="runs/<kind>-<size>-<time>")
]
Resume = Annotated[
    Path | None,
    typer.Option(
        help="Continue the run in this directory from its newest checkpoints (its own options; "
        "an option given that differs from the run's is refused)."
    ),
]


# A number as typed: ASCII digits only. int() and float() also take "1_0" (10) and other
# scripts' digits ("٤" is 4): a value the user did not mean, accepted without a word.
_PLAIN = {
    int: re.compile(r"[+-]?[0-9]+"),
    float: re.compile(
        r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.I
    ),
}


def plain_number(text: str, cast: type, option: str) -> Any:
    """``text`` read as ``cast`` (int or float) if it is a plain ASCII number, else one line."""
    if not _PLAIN[cast].fullmatch(text.strip()):
        kind = "a whole number" if cast is int else "a number"
        odd = "_" in text or not text.isascii()
        raise UserError(f"{option} takes {kind} in the digits 0-9, got {text!r}",
                        hint="no underscores, no other scripts' digits" if odd else None)  # fmt: skip
    try:
        return cast(text.strip())
    except ValueError:  # past int()'s own digit limit (4300): no option's bound is that long
        raise UserError(f"{option} is {len(text.strip())} digits long, past any bound") from None


def refuse_non_utf8(path: str, what: str) -> None:
    """One line for a path whose bytes are not UTF-8 (argv's surrogate escapes): the run
    trained, then its own files (config, page, parquet) failed to name it, a traceback."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{what} {os.fsencode(path)!r} is not a UTF-8 path",
                        hint="give a path in UTF-8")  from None  # fmt: skip


def refuse_unknown_home(path: str, what: str) -> None:
    """One line for ``~user/...`` naming no user here: the loaders' ``expanduser`` raised
    pathlib's RuntimeError ("Could not determine home directory"), a traceback."""
    try:
        Path(path).expanduser()
    except RuntimeError:
        raise UserError(f"{what} {path!r}: no home folder to expand {path.split('/')[0]} to",
                        hint="give the folder's full path") from None  # fmt: skip


def _utf8_or_none(path: str | None, what: str) -> str | None:
    if path is not None:
        refuse_non_utf8(path, what)
        refuse_unknown_home(path, what)
    return path


def _source_overrides(specs: list[str] | None) -> dict[str, str]:
    """``--source NAME=PATH`` items by name, each path in UTF-8 and under a known home."""
    out = parse_source_overrides(specs or [])
    for name, path in out.items():
        refuse_non_utf8(path, f"--source {name}:")
        refuse_unknown_home(path, f"--source {name}:")
    return out


def check_out_path(path: Path | None, flag: str) -> Path | None:
    """An ``--out`` or ``--resume`` folder, refused in one line before anything is made when
    it cannot be what the user meant: a control character (a pasted newline or ESC: a folder
    no listing shows as typed), bytes that are not UTF-8 (the run trained, then its own files
    failed to name the folder) or a symbolic link to nothing (mkdir's "File exists")."""
    if path is None:
        return None
    check_path(path, flag)
    refuse_non_utf8(str(path), flag)  # first: visible() escapes its surrogates too
    if visible(str(path)) != str(path):
        raise UserError(f"{flag} {str(path)!r} holds control characters", hint="give a plain path")
    for p in (path, *path.parents):  # a dangling link anywhere above it stops mkdir too
        # os.path's tests, not Path's: they answer False where the system refuses to look
        if os.path.islink(p) and not os.path.exists(p):
            raise UserError(
                f"{flag} {path}: {p} is a dangling symbolic link (its target does not exist)",
                hint="remove the link or create what it points to, or give another folder",
            )
    return path


@dataclass(frozen=True)
class RunArgs:
    """What a run command was given: the config its options make, and the rest."""

    config: RunConfig  # as typed, unresolved: ``checked`` validates it
    out: Path | None = None
    resume: Path | None = None
    explicit: frozenset[str] = frozenset()  # the parameters typed on the command line


def config_from(values: dict[str, Any]) -> RunConfig:
    """A ``RunConfig`` from option values by field name (the nested ones routed to their class)."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {name: {} for name in NESTED}
    for name, value in values.items():
        value = CONVERT[name](value) if name in CONVERT else value
        where = BY_NAME[name].nested
        (nested[where] if where else top)[name] = value
    return RunConfig(**top, **{n: NESTED[n][0](**kw) for n, kw in nested.items()})


def run_options(
    *, one_cell: bool, defaults: dict[str, Any] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Append the config's options (and ``--out``; ``--resume`` for a one-cell command) to a
    command; it receives them as ``run: RunArgs``. ``defaults`` overrides a field's default for
    this command (shown in its help)."""
    defaults = defaults or {}

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "run"]
        taken = {p.name for p in own}
        opts = [o for o in OPTIONS if (one_cell or not o.cli.one_cell) and o.name not in taken]
        extra = [(o.name, o.annotation(defaults.get(o.name, o.default)),
                  defaults.get(o.name, o.default)) for o in opts]  # fmt: skip
        extra += [("out", Out, None)] + ([("resume", Resume, None)] if one_cell else [])

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop("typer_ctx")
            # what the user typed, as opposed to defaults: --resume compares only these
            # (by name: typer may carry its own copy of click's ParameterSource enum)
            explicit = frozenset(
                name for name in kwargs
                if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
            )  # fmt: skip
            values = {o.name: kwargs.pop(o.name) for o in opts}
            for flag in ("out", "resume"):  # looked up by every command: one line, first
                check_out_path(kwargs.get(flag), f"--{flag}")
            run = RunArgs(config_from(values), out=kwargs.pop("out"),
                          resume=kwargs.pop("resume", None), explicit=explicit)  # fmt: skip
            return fn(**kwargs, run=run)

        ctx_param = inspect.Parameter(
            "typer_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context
        )
        params = [
            *own,
            *(inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
              for n, a, d in extra),
            ctx_param,
        ]  # fmt: skip
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def flag_of(field: str) -> str:
    """A config field (dotted when nested: ``clip_params.zclip_z``) as its option's flag."""
    leaf = field.rpartition(".")[2]
    return BY_NAME[leaf].flag if leaf in BY_NAME else field


def checked(cfg: RunConfig) -> RunConfig:
    """``cfg`` itself, once it resolves: bad options fail before any work starts (the checks a
    saved config passes too are experiments/config_checks.py's; these are the command line's)."""
    check_config(cfg, flag_of)  # --mixer-sharpness with exp3: RunConfig's own refusal
    if cfg.hf_config is not None:  # the loader's own checks, before the run's folder is made
        read_config(cfg.hf_config)
    return cfg


def resumed(run: RunArgs, clip: str) -> tuple[RunConfig, str]:
    """``--resume DIR``: the run's own base config and arms, checked against what was typed."""
    from andrea_diag.experiments.resume import run_configs
    from andrea_diag.factories import mark_recorded, trust_spec

    out = Path(run.resume)  # type: ignore[arg-type]
    try:
        meta, saved = run_configs(out)
    except UserError as exc:
        raise _before_the_range(exc, out) from None
    if not saved:
        raise UserError(f"{out} has no started arm to continue", hint="start it again instead")
    for cfg in saved:  # the run's word only: never called unless typed again (factories.py)
        for spec in (cfg.model_factory, cfg.data_factory):
            if spec:
                mark_recorded(spec, out)
    arms = ",".join(meta["arms"])
    base = dataclasses.replace(saved[0], clip="none", arm="")  # each arm sets its own
    typed_names = sorted(run.explicit & BY_NAME.keys())
    if run.explicit - {"resume"}:
        typed = checked(run.config)
        for name in typed_names:
            opt = BY_NAME[name]
            old, new = opt.get(base), opt.get(typed)
            if old != new and not opt.cli.runtime:
                raise UserError(
                    f"{opt.flag} {new!r} differs from the run's {old!r} in {out}",
                    hint="resume with only --resume DIR (the run keeps its own options)",
                )
        # how, not what: may change (the runtime fields are RunConfig's own)
        runtime = {n: getattr(typed, n) for n in typed_names if BY_NAME[n].cli.runtime}
        base = dataclasses.replace(base, **runtime)
        for name in ("model_factory", "data_factory"):  # typed again: the user's own choice
            if name in run.explicit:
                trust_spec(getattr(typed, name))
    if "clip" in run.explicit and clip != arms:
        raise UserError(f"--clip {clip} differs from the run's arms {arms} in {out}")
    _refuse_recorded_paths(base, run.explicit, out)
    return base, arms


def _before_the_range(exc: UserError, out: Path) -> UserError:
    """``exc`` (a saved config refused), or, where a positive option outside
    ``fields.POSITIVE_RANGE`` refused it, what that means: the run was made before the range
    existed (round 27), so its file is not corrupt, as ``run_configs`` words every refusal,
    but this version cannot continue it. The :class:`OutOfRange` raised by ``check_bounds`` is
    found where it started, behind the lines that restated it (``__context__``: each was
    raised while handling the one before)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, OutOfRange):
        cause = cause.__context__
    if cause is None:
        return exc
    lo, hi = POSITIVE_RANGE
    return UserError(
        f"{out} was made before a positive option had to be from {lo:g} to {hi:g}, and its "
        f"{cause.flag} {cause.value!r} is outside that range",
        hint=f"this version cannot continue it: start it again with {cause.flag} from {lo:g} "
        f"to {hi:g}, or continue it with the andrea-diag version that made it",
    )


def _refuse_recorded_paths(base: RunConfig, explicit: set[str], out: Path) -> None:
    """A path named only by the run's config.json (a ``--source`` folder, an ``--hf-config``)
    is not read: the run may be someone else's, pointing at files of yours it would train on
    and leak through its checkpoints. Typed again (equal, or the resume is refused above),
    it is the user's own choice, as for the factories."""
    from andrea_diag.data.corpus import GENERATED

    named = [f"--source {n}={p}" for n, p in base.sources.items() if p != GENERATED]
    if named and "sources" not in explicit:
        raise UserError(
            f"{out}'s config.json names {', '.join(named)}; a run directory is untrusted, "
            "so a path it names is not read",
            hint=f"if you trust it, give it again: --resume {out} {' '.join(named)}",
        )
    if base.hf_config and "hf_config" not in explicit:
        raise UserError(
            f"{out}'s config.json names --hf-config {base.hf_config}; a run directory is "
            "untrusted, so a path it names is not read",
            hint=f"if you trust it, give it again: --resume {out} --hf-config {base.hf_config}",
        )
