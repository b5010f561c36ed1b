"""Python API input refused where it is given (round 28, from a bad-input audit):

- A config field of the wrong type went through every bound (``True >= 1``, ``2.0 >= 1``):
  ``RunConfig(seed=True)`` trained with seed ``true``, ``steps=True`` one update,
  ``micro_batch=2.0`` ended in torch's multinomial after the run's folder was made,
  ``seed=np.int64(1)`` trained the arm and then failed writing JSON ("int64 is not JSON
  serializable"). Each wrong type is a ``BadType`` (a ``TypeError``) naming the field, where
  the config is made (``field_types.py``); a numpy scalar is the number it holds.
- ``make_clipper(mode, params=ClipParams(...))``, the documented way into the adaptive modes,
  never validated the parameters: ``agc_lambda=1e-320`` zeroed every gradient,
  ``zclip_alpha=1.5`` ran, ``zclip_warmup=2.5`` was torch's "full(): argument 'size'" at the
  first update. A ``ClipParams`` is checked when it is made.
- ``ProbeConfig(lockin_every=-5)`` resolved to a sample every update, without a word.
- ``RunConfig(sources={"gutenberg": ""})`` (an unset variable) trained on every text file of
  the working folder as that source (``Path("")`` is ``.``); the CLI's ``--source gutenberg=``
  has always been refused.
- A library caller's own rich ``Console`` rewrote ``:name:`` codes (``a:b:c`` as ``a🅱c``);
  ``console_text.as_typed`` is that console printing them as typed.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rich.console import Console
from rich.progress import Progress

from andrea_diag.clip.modes import make_clipper
from andrea_diag.clip_params import ClipParams
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.console_text import as_typed
from andrea_diag.errors import UserError


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [("seed", True, "seed must be an int, got bool True"),
     ("steps", True, "steps must be an int or None, got bool True"),
     ("micro_batch", 2.0, "micro_batch must be an int or None, got float 2.0"),
     ("lr", "1e-3", "lr must be a number or None, got str '1e-3'"),
     ("max_norm", torch.tensor(1.0), "max_norm must be a number, got Tensor"),
     ("cuda_graph", "yes", "cuda_graph must be True or False, got str 'yes'"),
     ("inject", "outlier@5", "inject must be a list of str, got str 'outlier@5'"),
     ("sources", ["gutenberg=generated"], "sources must be a dict of str to str, got list"),
     ("probes", {"spike_z": 3.0}, "probes must be a ProbeConfig, got dict")],
    ids=["bool-seed", "bool-steps", "float-micro-batch", "str-lr", "tensor-max-norm",
         "str-flag", "str-for-list", "list-for-dict", "dict-for-probes"],
)  # fmt: skip
def test_a_run_config_field_of_the_wrong_type_is_one_type_error_naming_it(
    field: str, value: Any, said: str
) -> None:
    with pytest.raises(TypeError, match=f"^RunConfig: {re.escape(said)}") as info:
        RunConfig(**{field: value})
    assert isinstance(info.value, UserError)  # the CLI's one line too, if one ever reaches it


def test_numpy_scalars_in_a_run_config_are_the_python_numbers_they_hold() -> None:
    cfg = RunConfig(seed=np.int64(3), steps=np.int32(8), lr=np.float32(0.5), max_norm=np.float64(2))
    assert (cfg.seed, cfg.steps, cfg.lr, cfg.max_norm) == (3, 8, 0.5, 2.0)
    assert [type(v) for v in (cfg.seed, cfg.steps, cfg.lr, cfg.max_norm)] == [
        int,
        int,
        float,
        float,
    ]
    json.dumps(cfg.resolve().to_dict())  # config.json and summary.json: JSON has no int64


@pytest.mark.parametrize(
    ("mode", "params", "error", "said"),
    [("agc", {"agc_lambda": 1e-320}, ValueError, "--agc-lambda must be from 1e-30 to 1e+30"),
     ("agc", {"agc_eps": 1e39}, ValueError, "--agc-eps must be from 1e-30 to 1e+30"),
     ("zclip", {"zclip_alpha": 1.5}, ValueError, "--zclip-alpha must be in (0, 1), got 1.5"),
     ("skip", {"skip_window": 0}, ValueError, "--skip-window must be at least 4, got 0"),
     ("zclip", {"zclip_warmup": 2.5}, TypeError,
      "ClipParams: zclip_warmup must be an int, got float 2.5"),
     ("agc", {"agc_lambda": torch.tensor(0.01)}, TypeError,
      "ClipParams: agc_lambda must be a number, got Tensor")],
    ids=["agc-lambda-0-in-float32", "agc-eps-overflows", "zclip-alpha", "skip-window",
         "float-warmup", "tensor-lambda"],
)  # fmt: skip
def test_clip_params_for_make_clipper_are_refused_when_made(
    mode: str, params: dict, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}"):
        make_clipper(mode, params=ClipParams(**params))


def test_numpy_scalars_in_clip_params_are_the_python_numbers_they_hold() -> None:
    p = ClipParams(zclip_warmup=np.int64(5), agc_eps=np.float32(0.5))
    assert (p.zclip_warmup, p.agc_eps) == (5, 0.5)
    assert (type(p.zclip_warmup), type(p.agc_eps)) == (int, float)


@pytest.mark.parametrize(
    ("probes", "error", "said"),
    [({"lockin_every": -5}, ValueError, "lockin_every must be at least 1"),
     ({"lockin_every": 0}, ValueError, "lockin_every must be at least 1"),
     ({"spike_window": True}, TypeError, "ProbeConfig: spike_window must be an int, got bool"),
     ({"shadow": "no"}, TypeError, "ProbeConfig: shadow must be True or False or None")],
    ids=["negative-lockin-every", "zero-lockin-every", "bool-window", "str-shadow"],
)  # fmt: skip
def test_a_run_configs_probe_settings_are_checked_for_their_type_and_lockin_every(
    probes: dict, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}"):
        RunConfig(steps=20, probes=ProbeConfig(**probes)).resolve()


@pytest.mark.parametrize("path", ["", "   "])
def test_a_blank_source_path_in_a_run_config_is_refused_not_read_as_the_working_folder(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("whatever text happens to be here " * 500)
    with pytest.raises(UserError, match=r"^--source gutenberg='\s*': an empty path names no"):
        RunConfig(sources={"gutenberg": path}).resolve()


def _caller_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=300, force_terminal=False, color_system=None), buf


def test_a_callers_console_seen_through_as_typed_prints_emoji_codes_as_typed() -> None:
    console, buf = _caller_console()
    seen = as_typed(console)
    seen.print("arm a:b:c in runs/x:fire:y")
    with Progress(console=seen) as progress:  # rich drives it as it does the caller's own
        progress.print("cell :smile:")
    console.print(":fire:")  # the caller's own object keeps its own setting
    said = buf.getvalue()
    assert "arm a:b:c in runs/x:fire:y" in said and "cell :smile:" in said, said
    assert "\U0001f525" in said.splitlines()[-1] and "\U0001f171" not in said, said


def test_as_typed_shares_the_callers_settings_and_makes_a_console_when_given_none() -> None:
    console, _ = _caller_console()
    as_typed(console).quiet = True  # what a command sets on its console reaches the caller's
    assert console.quiet
    own = as_typed(None, stderr=True)  # the toolkit's own: make_console's, codes off
    assert isinstance(own, Console) and own.stderr


def test_run_cascade_prints_onto_a_callers_console_with_codes_as_typed(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from andrea_diag.config import RunConfig
    from andrea_diag.experiments import cascade

    def load_data(cfg: object, console: Console) -> None:  # the first line a cascade prints
        console.print("reading runs:fire:x")
        raise RuntimeError("stop here")

    monkeypatch.setattr(cascade, "load_data", load_data)
    buf = io.StringIO()
    console = Console(file=buf, width=300)  # rich's default: emoji codes on
    spec = cascade.CascadeSpec(base=RunConfig(size="tiny", steps=2), clips=["none"], out=tmp_path)
    with pytest.raises(RuntimeError, match="stop here"):
        cascade.run_cascade(spec, console=console)
    assert "reading runs:fire:x" in buf.getvalue() and "\U0001f525" not in buf.getvalue()
    console.print(":fire:")  # the caller's own object keeps its own setting
    assert "\U0001f525" in buf.getvalue()


def test_a_run_config_takes_a_path_for_a_source_and_a_tuple_for_a_list(tmp_path) -> None:
    # review finding: both refused by the round's type checks, both what a caller would give
    from andrea_diag.config import RunConfig

    cfg = RunConfig(size="tiny", sources={"gutenberg": tmp_path}, inject=("spike@5",))
    assert cfg.sources == {"gutenberg": str(tmp_path)} and cfg.inject == ["spike@5"]
