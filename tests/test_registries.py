"""Extension points are one registry each (issue 23 item 6): what a new clip mode or precision
touches, and that the lists others read are derived from those registries.

    pytest tests/test_registries.py -q
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from andrea_diag.clip.modes import CLIPPERS, clip_modes
from andrea_diag.clip_params import MODE_PARAMS, ClipParams
from andrea_diag.commands.options import BY_NAME, OPTIONS
from andrea_diag.config import RunConfig
from andrea_diag.train.components import PRECISIONS, precision_help


def test_every_mode_parameters_class_belongs_to_a_registered_clip_mode() -> None:
    assert set(MODE_PARAMS) <= set(CLIPPERS), set(MODE_PARAMS) - set(CLIPPERS)
    assert clip_modes()[:3] == ("none", "global", "per-tensor")  # fixed modes first, no re-sort


def test_each_mode_parameter_is_a_clip_params_field_and_a_cli_option() -> None:
    """A mode's dataclass owns its options: ClipParams and the CLI are built from it."""
    union = {f.name for f in dataclasses.fields(ClipParams)}
    for mode, cls in MODE_PARAMS.items():
        for f in dataclasses.fields(cls):
            assert f.name in union, (mode, f.name)
            opt = BY_NAME[f.name]
            assert opt.nested == "clip_params" and opt.default == f.default, (mode, f.name)
    assert {o.name for o in OPTIONS if o.nested == "clip_params"} == union


def test_precision_choices_and_help_come_from_the_registry() -> None:
    assert list(PRECISIONS) == ["fp32", "bf16", "fp16"]
    assert all(cls.name == name for name, cls in PRECISIONS.items())
    assert BY_NAME["precision"].cli.help == precision_help()
    assert all(cls.help in precision_help() for cls in PRECISIONS.values())


def test_the_default_probes_are_the_registry_in_its_order() -> None:
    """make_probes builds one probe per registered factory; the config's switches drop some."""
    from andrea_diag.config import ProbeConfig
    from andrea_diag.probes import PROBES, make_probes, register_probe

    assert list(PROBES) == ["layers", "spikes", "optstate", "lockin"]
    model = torch.nn.Linear(4, 4)
    full = make_probes(model, ProbeConfig(shadow=False), total_steps=10, vocab_size=4, block_size=4)
    assert [type(p).__name__ for p in full] == [
        "LayerGradNormProbe", "SpikeProbe", "OptStateProbe", "LockInProbe"
    ]  # fmt: skip
    off = make_probes(
        model, ProbeConfig(shadow=False, per_layer=False, lockin=False), total_steps=10
    )
    assert [type(p).__name__ for p in off] == ["SpikeProbe", "OptStateProbe"]
    marker = object()
    try:
        register_probe("extra")(lambda setup: marker)  # type: ignore[arg-type,return-value]
        assert (
            make_probes(model, ProbeConfig(shadow=False, lockin=False), total_steps=10)[-1]
            is marker
        )
    finally:
        del PROBES["extra"]


def test_a_registered_precision_is_a_choice_of_the_cli_and_of_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One class and one @register_precision: --precision's check and help follow."""
    from andrea_diag.commands import options
    from andrea_diag.train import components

    monkeypatch.setattr(components, "PRECISIONS", dict(components.PRECISIONS))

    @components.register_precision
    class FP32Twice(components.Precision):
        name, help = "fp32x2", "fp32x2 (a test's)"

    assert "fp32x2 (a test's)" in components.precision_help()
    options.checked(RunConfig(precision="fp32x2"))  # accepted: no list elsewhere to extend
    assert isinstance(components.make_precision("fp32x2", torch.device("cpu")), FP32Twice)
    assert options.BY_NAME["precision"].cli.help == (
        "fp32; bf16 (autocast); fp16 (autocast + GradScaler: an overflow skips the update and "
        "halves the scale, both recorded)."
    )  # the CLI's help, from the registry as it stood at import


def test_an_unknown_precision_from_python_is_refused_before_any_folder_exists(tmp_path) -> None:
    """The config imports no torch, so the experiments check the precision registry first."""
    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
    from andrea_diag.experiments.sweep import SweepSpec, run_sweep
    from andrea_diag.train.components import UnknownPrecision

    base = RunConfig(size="tiny", precision="fp8", steps=2)
    with pytest.raises(UnknownPrecision, match="fp8"):
        run_cascade(CascadeSpec(base=base, out=tmp_path / "c"))
    with pytest.raises(UnknownPrecision, match="fp8"):
        run_sweep(SweepSpec(base=base, precisions=["fp8"], lrs=[1e-3], out=tmp_path / "s"))
    assert list(tmp_path.iterdir()) == []
