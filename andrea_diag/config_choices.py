"""The run config's named choices: the values each of its ``Literal`` fields may take, and the
one check :meth:`RunConfig.resolve <andrea_diag.config.RunConfig.resolve>` runs on them and on
the fields no option's bounds cover (``fields.check_bounds``): a factory or ``--hf-config``
given blank, and ``corpus_seed``.

    check_choices(cfg)     # UserError: unknown mixer 'exp4' (hint: choose from seeded, exp3)

The names a registry owns (the clip mode, the precision) are not here: their registries check
them (``experiments/config_checks.REGISTERED``), so this module, like the config, imports no
torch.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from andrea_diag.errors import BadArgument, UserError
from andrea_diag.fields import MAX_SEED
from andrea_diag.presets import PRESETS, RECIPES

MixerPolicy = Literal["seeded", "exp3"]
ClipImpl = Literal["auto", "cuda", "reference", "torch"]
MatmulPrecision = Literal["highest", "high", "medium"]
DeviceName = Literal["auto", "cpu", "cuda"]
RecipeName = Literal["v1", "v2"]
SizeName = Literal["tiny", "12m", "120m", "tiny2", "30m", "60m"]
SourceMode = Literal["default-plus-given", "only"]


def check_choice(value: str, choices: Any, what: str) -> None:
    """A :class:`UserError` naming ``what`` unless ``value`` is one of ``choices`` (a tuple,
    or a ``Literal``)."""
    allowed = get_args(choices) if not isinstance(choices, tuple) else choices
    if value not in allowed:
        raise UserError(f"unknown {what} {value!r}", hint=f"choose from {', '.join(allowed)}")


def check_choices(cfg: Any) -> None:
    """Every named choice of the run config ``cfg`` (a ``RunConfig``) is one it knows."""
    check_choice(cfg.size, tuple(PRESETS), "size")
    check_choice(cfg.recipe, tuple(RECIPES), "recipe")
    check_choice(cfg.mixer, MixerPolicy, "mixer")
    check_choice(cfg.clip_impl, ClipImpl, "clip implementation")
    check_choice(cfg.matmul_precision, MatmulPrecision, "matmul precision")
    check_choice(cfg.device, DeviceName, "device")
    check_choice(cfg.source_mode, SourceMode, "--sources mode")
    for name, flag in (("model_factory", "--model"), ("data_factory", "--data"),
                       ("hf_config", "--hf-config")):  # fmt: skip
        value = getattr(cfg, name)
        if value is not None and not value.strip():  # "" read as unset: silently the toolkit's
            raise BadArgument(f"{flag} ({name}) {value!r} is blank: it names nothing",
                              hint="give one, or leave it None")  # fmt: skip
    if not 0 <= cfg.corpus_seed <= MAX_SEED:  # not an option: seed's bounds, for a caller
        raise BadArgument(f"corpus_seed must be from 0 to {MAX_SEED}, got {cfg.corpus_seed}")
