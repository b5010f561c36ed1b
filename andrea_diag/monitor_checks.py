"""``SpikeMonitor``'s arguments, checked when it is made: a wrong one is one ``TypeError`` (not
the kind of thing asked for) or ``ValueError`` (the right kind, a value it cannot use), raised
before the run directory exists, naming the argument.

Without these checks a bad argument surfaced late and far from its cause: a string for the
model or the optimizer as an ``AttributeError`` inside the probes; prompt ids past the
vocabulary as an ``IndexError`` at the lock-in sample, which then disabled the probe; a logger
without ``log`` at the first ``after_step``; an ``out_dir`` that is a file as
``NotADirectoryError``; a ``tensorboard_dir`` that is a file after the run directory was made;
``total_steps=0``, ``seed="a"``, ``vocab_size=0`` and probe options of the wrong type silently.

:func:`versioned` picks the folder a new run goes to (``out_dir``, else ``out_dir-2``, ...);
:mod:`andrea_diag.monitor_resume` reads back the run ``resume=True`` continues.

    >>> check_count("total_steps", 0)
    Traceback (most recent call last):
    ...
    ValueError: SpikeMonitor: total_steps must be a whole number of at least 1, got 0
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_diag import metrics
from andrea_diag.fields import MAX_SEED, MAX_UPDATES, cli_of, positive_problem
from andrea_diag.given_checks import given_folder, kind_of, writable_folder
from andrea_diag.probe_config import ProbeConfig

# what SpikeMonitor calls on every logger (andrea_diag.sinks.MetricSink)
SINK_METHODS = ("log", "events", "summary", "close")


def is_int(value: Any) -> bool:
    """A whole number: ``int`` or numpy's integers; not ``bool`` (``True`` is no count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_count(
    name: str, value: Any, lo: int = 1, hi: int = MAX_UPDATES, where: str = "SpikeMonitor"
) -> None:
    """``value`` is a whole number from ``lo`` to ``hi``; ``where``: the call that took it."""
    if not is_int(value):
        raise TypeError(f"{where}: {name} must be an int, got {kind_of(value)} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(
            f"{where}: {name} must be a whole number of at least {lo}, got {value}"
            if value < lo
            else f"{where}: {name} must be at most {hi}, got {value}"
        )


def check_dir(name: str, value: Any) -> None:
    """``value`` names a directory that is or can be made: not a file, nor inside one, nor in
    a folder this user may not write in (a framework callback failed inside ``fit`` then), and
    what ``given_folder`` refuses (``""``, a NUL, a name past 255 bytes, a control character,
    a place under ``/proc``), which surfaced once the run directory was being made, if ever."""
    path = given_folder(value, f"SpikeMonitor: {name}")
    writable_folder(path, f"SpikeMonitor: {name}", repr(str(path)),
                    "the run directory is made there; give a folder you can write in")  # fmt: skip


def check_model_and_optimizer(model: Any, optimizer: Any) -> None:
    """A module with trainable parameters, and an optimizer that steps some of them."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"SpikeMonitor: model must be a torch.nn.Module, got {kind_of(model)}")
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise TypeError(
            f"SpikeMonitor: optimizer must be a torch.optim.Optimizer, got {kind_of(optimizer)}"
        )
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    if not trainable:
        raise ValueError("SpikeMonitor: the model has no trainable parameters (requires_grad)")
    stepped = {id(p) for g in groups for p in g.get("params", ())}
    # disjoint: an optimizer made for another model (or a copy of this one) would step weights
    # the probes never read, and every optimizer-state column would be empty. Some overlap is
    # enough: an extra tensor outside the model (a learned loss weight) is the user's choice
    if not trainable & stepped:
        raise ValueError(
            "SpikeMonitor: none of the optimizer's parameters is a trainable parameter of the "
            "model: was the optimizer made for another model, or for a copy of this one?"
        )


def _type_ok(kind: str, value: Any) -> bool:
    """``value`` fits the field annotation ``kind`` (ProbeConfig's, a string)."""
    if value is None and kind.endswith("| None"):
        return True
    base = kind.removesuffix(" | None")
    if base == "bool":
        return isinstance(value, bool)
    if base == "int":
        return is_int(value)
    if base == "float":
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return True  # a field of another kind: ProbeConfig's own checks


def check_probe_config(cfg: Any) -> None:
    """Every probe setting of the right type and within the bounds its CLI flag has; named by
    its keyword (``spike_z``), not its flag."""
    if not isinstance(cfg, ProbeConfig):
        raise TypeError(f"SpikeMonitor: probes must be a ProbeConfig, got {kind_of(cfg)}")
    for f in dataclasses.fields(cfg):
        value, kind = getattr(cfg, f.name), str(f.type)
        if not _type_ok(kind, value):
            raise TypeError(
                f"SpikeMonitor: {f.name} must be {kind}, got {kind_of(value)} {value!r}"
            )
        meta = cli_of(f)
        if f.name == "lockin_every" and value is not None:  # no flag: every N updates, N >= 1
            check_count(f.name, value)
        elif meta is None or value is None or isinstance(value, bool):
            continue
        elif meta.positive and (problem := positive_problem(value)) is not None:
            raise ValueError(f"SpikeMonitor: {f.name} {problem}")
        elif is_int(value) and meta.lo is not None and meta.hi is not None:
            check_count(f.name, value, int(meta.lo), int(meta.hi))


def check_prompts(prompts: Any, vocab_size: int | None) -> None:
    """``{name: token ids}``: integer ids in ``[0, vocab_size)`` (``>= 0`` when the vocabulary
    is not known); an id past the table failed at the first lock-in sample, far into the run."""
    if prompts is None:
        return
    if not isinstance(prompts, Mapping):
        raise TypeError(
            f"SpikeMonitor: prompts must be a dict of name -> token ids, got {kind_of(prompts)}"
        )
    for name, ids in prompts.items():
        if not isinstance(name, str):
            raise TypeError(f"SpikeMonitor: prompt names must be str, got {kind_of(name)}")
        try:
            ids = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"SpikeMonitor: prompt {name!r} is not token ids ({exc})") from None
        if not ids.numel():  # dropped by the lock-in probe (torch.as_tensor([]) is float)
            continue
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"SpikeMonitor: prompt {name!r} holds {ids.dtype}, not integer ids")
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or (vocab_size is not None and high >= vocab_size):
            bad = low if low < 0 else high
            limit = f"[0, {vocab_size})" if vocab_size is not None else "0 or more"
            raise ValueError(
                f"SpikeMonitor: prompt {name!r} has token id {bad}, outside the vocabulary {limit}"
            )


def checked_loggers(loggers: Any) -> list[Any]:
    """The loggers as a list, each with ``log``, ``events``, ``summary`` and ``close``
    (:class:`~andrea_diag.sinks.MetricSink`)."""
    if loggers is None:
        return []
    if all(callable(getattr(loggers, m, None)) for m in SINK_METHODS):
        raise TypeError("SpikeMonitor: loggers must be a list of sinks: pass loggers=[sink]")
    if isinstance(loggers, (str, bytes, Mapping)) or not isinstance(loggers, Iterable):
        raise TypeError(f"SpikeMonitor: loggers must be a list of sinks, got {kind_of(loggers)}")
    out = list(loggers)
    for i, sink in enumerate(out):
        missing = [m for m in SINK_METHODS if not callable(getattr(sink, m, None))]
        if missing:
            raise TypeError(
                f"SpikeMonitor: loggers[{i}] ({kind_of(sink)}) is not a metric sink: it has no "
                f"{', '.join(missing)} (andrea_diag.sinks.MetricSink: log, events, summary, close)"
            )
    return out


def check_options(out_dir: Any, options: Mapping[str, Any]) -> None:
    """What ``SpikeMonitor.__init__`` (and a framework callback, when it is made) can check
    without the model. ``options``: its keyword arguments by name (the probe options are
    checked on the resolved :class:`ProbeConfig`, the prompts once the vocabulary is known)."""
    check_dir("out_dir", out_dir)
    if options["tensorboard_dir"] is not None:
        check_dir("tensorboard_dir", options["tensorboard_dir"])
    if options["total_steps"] is not None:
        check_count("total_steps", options["total_steps"])
    check_count("seed", options["seed"], 0, MAX_SEED)
    for name in ("vocab_size", "block_size"):
        if options[name] is not None:
            check_count(name, options[name], 1, 2**31 - 1)  # an embedding's row count
    if not isinstance(options["resume"], bool):
        raise TypeError(f"SpikeMonitor: resume must be a bool, got {kind_of(options['resume'])}")
    _check_kind("probes", options["probes"], ProbeConfig, "a ProbeConfig")
    _check_kind("meta", options["meta"], Mapping, "a dict")
    groups = options["layer_groups"]
    if groups is not None and not callable(groups):
        _check_kind("layer_groups", groups, Mapping, "a callable or a dict")
    tokenizer = options["tokenizer"]
    if tokenizer is not None and not callable(getattr(tokenizer, "decode", None)):
        raise TypeError(
            f"SpikeMonitor: tokenizer must have a decode(list[int]) method, got {kind_of(tokenizer)}"
        )


def _check_kind(name: str, value: Any, kind: type, what: str) -> None:
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"SpikeMonitor: {name} must be {what}, got {kind_of(value)}")


def versioned(out_dir: str | Path) -> Path:
    """``out_dir``, or when it already holds a run, the first free ``out_dir-2``, ``-3``, ...

    A second run of the same script keeps the first run's directory and gets its own, as
    TensorBoard and W&B users expect; ``resume=True`` continues ``out_dir`` itself. A name
    that is taken by anything but an empty folder (a file, a link, even a dangling one) is
    skipped: a link planted in a shared runs folder is never written through.
    """
    path = Path(out_dir)
    if not path.exists() or not any(path.iterdir()):
        return path
    if path.name in ("", ".", ".."):  # "." has no name to version: its folder's own name
        path = Path(os.path.abspath(path))
        if not path.name:
            raise ValueError(
                f"SpikeMonitor: out_dir {str(out_dir)!r} holds files and has no name to "
                "number a new run after: name a folder for the run"
            )
    n = 2
    while not _free(cand := path.with_name(f"{path.name}-{n}")):
        n += 1
    return cand


def _free(path: Path) -> bool:
    """Nothing at ``path``, or an empty folder that is not a link."""
    if path.is_symlink():
        return False
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def checked_number(where: str, name: str, value: Any) -> float:
    """A hook's scalar (the loss, the clip's total norm) as a float: a number or a one-element
    tensor; NaN and inf pass (a diverged update is a finding), an int past a float is refused."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"SpikeMonitor.{where}: {name} must be one number, got a tensor "
                             f"of shape {tuple(value.shape)}")  # fmt: skip
        value = value.detach()
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"SpikeMonitor.{where}: {name} must be a tensor or a number, got "
                        f"{kind_of(value)}")  # fmt: skip
    try:
        return float(value)  # host sync for a tensor
    except OverflowError:  # a 400-digit int: float() would raise from deep inside the hook
        bits = int(value).bit_length()  # formatting it as a float would overflow too
        raise ValueError(
            f"SpikeMonitor.{where}: {name} is an int of {bits} bits, past a float"
        ) from None


def check_backward(per_example: Any, source: Any, phase: Any, weights: Any) -> None:
    """``after_backward``'s optional arguments: per-example losses and their source ids as
    tensors of one length, an int phase (a JSON line holds 64 bits), a dict of weights."""
    where = "SpikeMonitor.after_backward"
    for name, value in (("per_example_loss", per_example), ("example_source", source)):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a tensor, got {kind_of(value)}")
    if source is not None:
        n = per_example.numel() if per_example is not None else 0
        if source.numel() != n:  # else the outlier would be named after another's source
            raise ValueError(f"{where}: example_source has {source.numel()} entries for {n} "
                             "per-example losses")  # fmt: skip
        if source.is_floating_point() or source.is_complex():
            raise TypeError(f"{where}: example_source holds {source.dtype}, not integer ids")
    if phase is not None and not is_int(phase):
        raise TypeError(f"{where}: phase must be an int or None, got {kind_of(phase)}")
    if phase is not None and not -(2**63) <= phase < 2**63:
        raise ValueError(
            f"{where}: phase must fit 64 bits, got an int of {int(phase).bit_length()} bits"
        )
    if weights is not None and not isinstance(weights, Mapping):
        raise TypeError(f"{where}: weights must be a dict, got {kind_of(weights)}")


def framework_row(values: Any, update: Any = None) -> dict[str, Any]:
    """The numbers of what a framework logged: floats, ints (past 64 bits too: jsonl writes
    them exactly), numpy scalars and one-element tensors (NaN too: a diverged eval is a finding);
    anything else dropped. A key ``update`` is kept as ``logged/update``: it would overwrite
    the monitor's own update number in ``framework.jsonl``. ``values``: a mapping; ``update``: a
    whole number from 0 (``1.7`` and ``-5`` were written as updates 1 and -5)."""
    where = "SpikeMonitor.log_framework"
    if not isinstance(values, Mapping):
        raise TypeError(f"{where}: values must be a dict of name -> number, got {kind_of(values)}")
    if update is not None:  # 0: before the first update (an evaluation before training)
        check_count("update", update, 0, where=where)
    row: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()  # host sync: at the framework's own log cadence only
        elif isinstance(value, numbers.Number) and hasattr(value, "item"):
            value = value.item()  # np.int64 is no int: it was dropped
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row["logged/update" if str(key) == "update" else str(key)] = value
    return row


# What SpikeMonitor computes itself in a row (the recorder stamps unix_time_s); with the probes'
# columns (metrics.owner_of) refused to add_columns: a user's "update" replaced the monitor's.
# The loop's other columns (tokens, loss_<source>) are the user's loop's facts; microbatches,
# grad_norm_post and clip_coef too, though the monitor writes them: a loop corrects them (one
# after_backward for a group, a clip after after_clip), as integrations/capture.py does.
MONITOR_COLUMNS = frozenset(
    c.name
    for c in (metrics.UPDATE, metrics.LOSS, metrics.LR, metrics.GRAD_NORM, metrics.PHASE,
              metrics.NONFINITE, metrics.APPLIED, metrics.UNIX_TIME_S)
)  # fmt: skip
_HOLDS = {float: "number", int: "number", bool: "flag", str: "text"}  # a schema kind's cell


def _cell(value: Any) -> str | None:
    """What a metrics cell reads ``value`` as: number, flag, text or gap (None); ``None`` for
    what no cell holds (a list, a dict, a tensor of many elements: a gap on reading, or at
    the flush an error that lost the rows waiting with it)."""
    if value is None or isinstance(value, str):
        return "text" if value is not None else "gap"
    if isinstance(value, torch.Tensor):
        n, dt = value.numel(), value.dtype
        kind = "b" if dt == torch.bool else "c" if dt.is_complex else "f"
    elif isinstance(value, (np.ndarray, np.generic)):
        n, kind = value.size, value.dtype.kind
    else:  # bool before int: True is no number
        n = 1
        kind = "b" if isinstance(value, bool) else "f" if isinstance(value, (int, float)) else "?"
    return {"b": "flag", "i": "number", "u": "number", "f": "number"}.get(kind) if n == 1 else None


def _writer(name: str) -> str | None:
    """``""`` when the monitor writes column ``name`` itself, `` (probe 'spikes')`` when one of
    its probes does, None when it is the user's to give (the loop's, the evaluator's, a new one)."""
    if name in MONITOR_COLUMNS:
        return ""
    owner = metrics.owner_of(name)
    return None if owner in (None, metrics.LOOP, metrics.EVALUATOR) else f" (probe {owner!r})"


def checked_columns(columns: dict[str, Any]) -> dict[str, Any]:
    """``add_columns``' columns: none of the monitor's own (:data:`MONITOR_COLUMNS`, a probe's),
    each a value a cell holds, of its schema kind when the schema declares the name (a text
    ``eval_loss`` failed the lock-in probe at close)."""
    where = "SpikeMonitor.add_columns"
    taken = {n: w for n in columns if (w := _writer(n)) is not None}
    if taken:  # every such name in one line, before any column is written
        said, first = ", ".join(f"{n!r}{w}" for n, w in taken.items()), next(iter(taken))
        raise ValueError(f"{where}: {said} is the monitor's own column (a probe's stays its own "
                         f"when the probe is off, so a column means one thing in every run): yours "
                         f"would replace it; choose another name, e.g. 'my/{first}'")  # fmt: skip
    for name, value in columns.items():
        col, cell = metrics.lookup(name), _cell(value)
        if cell is None:
            raise TypeError(f"{where}: column {name!r} must be a number, a bool, a str, None or "
                            f"a one-element tensor, got {kind_of(value)}")  # fmt: skip
        if col is not None and cell not in (_HOLDS.get(col.kind), "gap"):
            raise TypeError(f"{where}: column {name!r} holds a {_HOLDS.get(col.kind)} in the "
                            f"schema ({col.meaning}), got {kind_of(value)} {value!r}")  # fmt: skip
    return columns


def checked_flag(where: str, name: str, value: Any) -> bool | None:
    """A hook's yes/no as a bool (a one-element bool tensor too; None passed): ``after_step``'s
    ``applied="no"`` was an applied update to the probes (truthy) and a skipped one on disk."""
    if value is None:
        return None
    if _cell(value) != "flag":
        raise TypeError(f"SpikeMonitor.{where}: {name} must be a bool, got {kind_of(value)}")
    return bool(value)  # host sync for a tensor


__all__: list[str] = [
    "check_backward",
    "check_count",
    "check_dir",
    "check_model_and_optimizer",
    "check_options",
    "check_probe_config",
    "check_prompts",
    "checked_columns",
    "checked_flag",
    "checked_loggers",
    "checked_number",
    "framework_row",
    "is_int",
    "versioned",
]
