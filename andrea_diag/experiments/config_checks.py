"""The checks a run's config must pass beyond :meth:`RunConfig.resolve`, with one owner for
both places a config comes from: the command line (``commands/options.checked``, which names
the options typed) and a run's saved ``config.json`` at ``--resume``
(``experiments/resume.check_saved``, which names the file's fields).

    check_config(cfg, name=lambda field: field)        # a saved config: its own field names

A name from a registry (the precision, the clip mode) must be registered; every float,
nested ones included, must be finite (nan passes every bound: ``nan < lo`` and ``nan > hi``
are both False); and one microbatch must be no more than one forward takes (past that it only
exhausts the memory, after the run's folder was made).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from andrea_diag.clip.modes import CLIPPERS, UnknownClipMode
from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.train.components import check_precision

Namer = Callable[[str], str]  # a (dotted) field's name as the user knows it: "--micro-batch"


def non_finite(obj: Any, prefix: str = "") -> tuple[str, float] | None:
    """The first float field of the dataclass ``obj`` or of one nested in it that is nan or
    infinite, as (dotted field name, value); None if every one is finite."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            if (inner := non_finite(value, f"{prefix}{f.name}.")) is not None:
                return inner
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{prefix}{f.name}", value
    return None


def check_microbatch_tokens(resolved: RunConfig, name: Namer) -> None:
    """One microbatch is one forward: past accum-check's cap on a forward it would only exhaust
    the memory (the kernel's OOM killer, not a line)."""
    # here, not at the top: accum_check builds models, and --help should not import it
    from andrea_diag.experiments.accum_check import MAX_FORWARD_TOKENS

    tokens = (resolved.micro_batch or 0) * (resolved.seq_len or 0)
    if tokens > MAX_FORWARD_TOKENS:
        raise UserError(
            f"a microbatch of {name('micro_batch')} {resolved.micro_batch} x "
            f"{name('seq_len')} {resolved.seq_len} is {tokens:,} tokens, more than one "
            f"forward takes ({MAX_FORWARD_TOKENS:,})",
            hint=f"lower {name('micro_batch')} and raise {name('accum')} (the same batch, in "
            "more microbatches)",
        )


def check_clip_mode(name: str) -> None:
    """:class:`UnknownClipMode` (a :class:`UserError`, and the ``ValueError`` a Python caller
    of run_cascade catches) unless ``name`` is a registered clip mode (clip/modes.py)."""
    if name not in CLIPPERS:
        raise UnknownClipMode(
            f"unknown clip mode {name!r}", hint=f"choose from {', '.join(CLIPPERS)}"
        )


# Fields whose value names a registered class: the registry (not the torch-free config) checks
# them, so a new precision or clip mode is one class and its registration.
REGISTERED: dict[str, Callable[[str], None]] = {
    "precision": check_precision,
    "clip": check_clip_mode,
}


def check_config(cfg: RunConfig, name: Namer) -> RunConfig:
    """``cfg`` resolved, once its registered names, its floats and its microbatch pass; a
    :class:`UserError` naming the field by ``name`` otherwise."""
    for field, check in REGISTERED.items():
        check(getattr(cfg, field))
    resolved = cfg.resolve()
    if (bad := non_finite(cfg)) is not None:
        raise UserError(f"{name(bad[0])} must be a finite number, got {bad[1]}")
    check_microbatch_tokens(resolved, name)
    return resolved
