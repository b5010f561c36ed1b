"""Python API input refused where it is given (round 28c, from a bad-input audit):

- ``run_cascade``/``run_sweep``/``run_ladder`` with ``RunConfig(mixer_sharpness=nan)`` (or an
  unknown clip mode among the arms: what ``config_checks.check_config`` refuses for the CLI and
  a saved config) were refused by the data mixer (the trainer) only after ``cascade.json`` (the
  arm's folder, ``sweep.json``) was written. Now ``checked_arms`` refuses them first, naming
  the field as Python names it.
- A spec's fields were never checked: ``CascadeSpec(clips="none")`` was the arms n, o, n, e
  ("--clip lists an arm twice: n,o,n,e"), ``out`` as a ``str`` an AttributeError, ``""`` the
  working folder; ``SweepSpec(lrs=[1e-3, 0.001])`` trained one cell twice, numpy numbers
  failed at sweep.json; a ladder without arm ``none`` trained every cell to state nothing.
  ``Path("")`` is ``Path(".")`` (no check can tell them apart): a cascade refused there now
  says it is the working folder.
- ``clip_grad_norm_(max_norm=10**400)`` (or ``norm_type=10**400``) was a bare OverflowError
  from ``float()`` (torch's too); now a ValueError naming it that is still an OverflowError.
  ``norm_type=True`` took the L1 norm without a word, where a bool ``max_norm`` is refused.
- ``SpikeMonitor(out_dir=...)``: a NUL was pathlib's "embedded null byte" (for
  ``tensorboard_dir``, after the run folder was made), a name past 255 bytes an OSError,
  ``/proc/x`` a FileNotFoundError, a control character a folder no listing shows as typed.

python -m pytest -q -p no:cacheprovider tests/test_bad_input_s28c_api.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments import cascade
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.experiments.ladder import LadderSpec, run_ladder
from andrea_diag.experiments.sweep import SweepSpec, run_sweep
from andrea_diag.monitor import SpikeMonitor

BASE = {"size": "tiny", "steps": 2, "device": "cpu"}

# -- 1. the config checks of the command line, for the Python entry points ------------------

REFUSED = pytest.mark.parametrize(
    ("base", "clips", "said"),
    [({"mixer_sharpness": float("nan")}, ["none"],
      "mixer_sharpness must be a finite number, got nan"),
     ({}, ["none", "bogus"], "unknown clip mode 'bogus'")],
    ids=["nan-sharpness", "unknown-clip-mode"],
)  # fmt: skip


@REFUSED
def test_run_cascade_refuses_what_check_config_refuses_before_any_folder(
    base: dict, clips: list[str], said: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(said)}") as info:  # when made (round 31)
        run_cascade(CascadeSpec(base=RunConfig(**BASE, **base), clips=clips, out=tmp_path / "c"))
    assert isinstance(info.value, UserError)  # the CLI's one line too
    assert list(tmp_path.iterdir()) == []  # before: cascade.json (and the arm's folder)


@REFUSED
def test_run_sweep_and_run_ladder_refuse_it_before_sweep_json(
    base: dict, clips: list[str], said: str, tmp_path: Path
) -> None:
    cfg = RunConfig(**BASE, **base)
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
        run_sweep(SweepSpec(base=cfg, lrs=[1e-3], clips=clips, out=tmp_path / "s"))
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):  # when made (round 31)
        run_ladder(LadderSpec(base=cfg, sizes=["tiny", "12m"], lrs=[1e-3], seeds=[0],
                              clips=["none", *clips[1:]] if len(clips) > 1 else ["none", "global"],
                              out=tmp_path / "l"))  # fmt: skip
    assert list(tmp_path.iterdir()) == []  # before: sweep.json and the first cell's folder


# -- 2. the specs' own fields -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "said"),
    [(lambda: CascadeSpec(clips="none"), TypeError,
      "CascadeSpec: clips must be a list of str, got str 'none'"),
     (lambda: SweepSpec(sizes="tiny"), TypeError,
      "SweepSpec: sizes must be a list of str, got str 'tiny'"),
     (lambda: SweepSpec(lrs=1e-3), TypeError, "SweepSpec: lrs must be a list of float, got float"),
     (lambda: SweepSpec(seeds=[True]), TypeError,
      "SweepSpec: seeds must be a list of int, got an item of bool True"),
     (lambda: SweepSpec(seeds={0, 1}), TypeError, "SweepSpec: seeds must be a list of int, got set"),
     (lambda: SweepSpec(lrs=[1e-3, 0.001]), ValueError, "SweepSpec: lrs lists 0.001 twice"),
     (lambda: CascadeSpec(clips=[]), ValueError, "CascadeSpec: clips is empty"),
     (lambda: LadderSpec(clips="none,global"), TypeError,
      "LadderSpec: clips must be a list of str, got str 'none,global'"),
     (lambda: LadderSpec(clips=["global", "agc"]), ValueError,
      "LadderSpec: clips ['global', 'agc']: the ladder compares arm none with at least one"),
     (lambda: CascadeSpec(resume="yes"), TypeError,
      "CascadeSpec: resume must be True or False, got str 'yes'"),
     (lambda: CascadeSpec(base={"size": "tiny"}), TypeError,
      "CascadeSpec: base must be a RunConfig, got dict")],
    ids=["str-clips", "str-sizes", "float-lrs", "bool-seed", "set-seeds", "same-lr-twice",
         "no-arm", "ladder-str-clips", "ladder-without-none", "str-resume", "dict-base"],
)  # fmt: skip
def test_a_spec_field_of_the_wrong_shape_is_one_error_naming_it_when_the_spec_is_made(
    make: Any, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}") as info:
        make()
    assert isinstance(info.value, UserError)


def test_a_str_for_a_list_is_told_to_pass_a_list_and_is_refused_if_set_later(tmp_path) -> None:
    with pytest.raises(TypeError) as info:
        CascadeSpec(clips="none")
    assert info.value.hint == "pass a list: clips=['none']"  # type: ignore[attr-defined]
    spec = CascadeSpec(base=RunConfig(**BASE), out=tmp_path / "c")
    spec.clips = "none"  # type: ignore[assignment]  (a field set after the spec was made)
    with pytest.raises(TypeError, match=r"^CascadeSpec: clips must be a list of str, got str"):
        run_cascade(spec)
    assert list(tmp_path.iterdir()) == []


def test_a_specs_lists_and_out_are_made_plain(tmp_path: Path) -> None:
    spec = SweepSpec(lrs=(np.float32(0.5), 1e-3), seeds=[np.int64(3)], clips=("none",),
                     out=str(tmp_path / "s"))  # fmt: skip
    assert spec.lrs == [0.5, 1e-3] and spec.seeds == [3] and spec.clips == ["none"]
    assert [type(v) for v in (*spec.lrs, *spec.seeds)] == [float, float, int]  # JSON takes them
    assert spec.out == tmp_path / "s" and isinstance(spec.out, Path)  # a str: AttributeError
    assert CascadeSpec(out=str(tmp_path / "c")).out == tmp_path / "c"
    assert LadderSpec(out=str(tmp_path / "l")).out == tmp_path / "l"


@pytest.mark.parametrize(
    ("out", "error", "said"),
    [("", ValueError, "CascadeSpec: out: an empty path names no file or folder"),
     ("runs/a\x00b", ValueError, r"CascadeSpec: out 'runs/a\x00b' holds a NUL character"),
     ("runs/a\nb", ValueError, r"CascadeSpec: out 'runs/a\nb' holds a control or invisible"),
     ("runs/a\u202eb", ValueError, r"CascadeSpec: out 'runs/a\u202eb' holds a control or"),
     (b"runs/x", TypeError, "CascadeSpec: out must be a str or a path, got bytes")],
    ids=["empty", "nul", "newline", "bidi-override", "bytes"],
)  # fmt: skip
def test_an_out_that_names_no_folder_is_refused_when_the_spec_is_made(
    out: Any, error: type[Exception], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=f"^{re.escape(said)}"):
        CascadeSpec(out=out)
    with pytest.raises(error):
        SweepSpec(out=out)
    assert list(tmp_path.iterdir()) == []


def test_path_empty_is_the_working_folder_and_a_refusal_there_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(cascade, "load_data", lambda cfg, console: None)  # no sources read
    monkeypatch.setattr(cascade, "check_streams", lambda data, seq_len: None)
    spec = CascadeSpec(base=RunConfig(**BASE), clips=["none"], out=Path(""))
    with pytest.raises(ValueError, match=r"^output directory \. \(the working folder\) exists"):
        run_cascade(spec)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# -- 3. clip_grad_norm_'s max_norm and norm_type ------------------------------------------


def _param() -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), 3.0)
    return p


@pytest.mark.parametrize("clip", [clip_grad_norm_, clip_grad_norm_with_stats])
@pytest.mark.parametrize(
    ("max_norm", "norm_type", "said"),
    [(10**400, 2.0, "max_norm must be a number a float can hold (at most 1.798e+308), got int "
      "about 10^400 (math.inf never clips)"),
     (-(10**400), 2.0, "max_norm must be a number a float can hold"),
     (1.0, 10**400, "norm_type must be a number a float can hold (at most 1.798e+308), got int "
      "about 10^400 (math.inf is the max norm)"),
     (1.0, 10**5000, "norm_type must be a number a float can hold")],
    ids=["huge-max-norm", "huge-negative-max-norm", "huge-norm-type", "int-past-4300-digits"],
)  # fmt: skip
def test_a_number_past_the_largest_float_is_a_value_error_naming_it(
    clip: Any, max_norm: int, norm_type: int, said: str
) -> None:
    p = _param()
    with pytest.raises(ValueError, match=f"^{re.escape(said)}") as info:
        clip([p], max_norm, norm_type)
    assert isinstance(info.value, OverflowError)  # what torch's float() raises: still caught
    assert torch.equal(p.grad, torch.full((4,), 3.0))


@pytest.mark.parametrize("clip", [clip_grad_norm_, clip_grad_norm_with_stats])
@pytest.mark.parametrize(
    "norm_type", [True, False, np.True_, torch.tensor(True)], ids=["True", "False", "np", "tensor"]
)
def test_a_bool_norm_type_is_refused_as_a_bool_max_norm_is(clip: Any, norm_type: Any) -> None:
    p = _param()
    with pytest.raises(TypeError, match=r"^norm_type must be a number \(2\.0, 1\.0, math\.inf"):
        clip([p], 1.0, norm_type)  # before: True was the L1 norm, False torch's count of nonzeros
    assert torch.equal(p.grad, torch.full((4,), 3.0))
    # what torch's float() reads otherwise is still read: its docs' "inf", an int p
    assert float(clip_grad_norm_([p], 100.0, "inf")) == 3.0
    assert float(clip_grad_norm_([p], 100.0, 1)) == 12.0


# -- 4. SpikeMonitor's out_dir and tensorboard_dir ----------------------------------------


def _monitor(out_dir: Any, **kwargs: Any) -> SpikeMonitor:
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    return SpikeMonitor(model, torch.optim.SGD(model.parameters(), lr=0.1), out_dir, **kwargs)


@pytest.mark.parametrize(
    ("name", "said"),
    [("run\x00x", r"SpikeMonitor: out_dir 'run\x00x' holds a NUL character, which no path can"),
     ("x" * 300, "a path component of SpikeMonitor: out_dir is longer than 255 bytes"),
     ("run\nx", r"SpikeMonitor: out_dir 'run\nx' holds a control or invisible character"),
     ("/".join(["y" * 200] * 25), "cannot look up SpikeMonitor: out_dir")],
    ids=["nul", "name-past-255-bytes", "newline", "past-path-max"],
)  # fmt: skip
def test_an_out_dir_no_folder_can_have_is_one_value_error_naming_it(
    name: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
        _monitor(name)
    assert list(tmp_path.iterdir()) == []  # before: the ESC and newline folders were made


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
@pytest.mark.parametrize("where", ["/proc/andrea-run", "/proc/andrea/run", "/sys/andrea-run"])
def test_an_out_dir_on_the_kernels_own_filesystem_is_refused(where: str) -> None:
    with pytest.raises(ValueError, match=rf"^SpikeMonitor: out_dir {where} is on the kernel's own"):
        _monitor(where)  # before: FileNotFoundError (PermissionError under /sys) from mkdir


def test_a_nul_in_tensorboard_dir_is_refused_before_the_run_folder_is_made(tmp_path) -> None:
    pytest.importorskip("tensorboardX", reason="the writer is checked first otherwise")
    said = r"SpikeMonitor: tensorboard_dir 'tb\x00x' holds a NUL character"
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
        _monitor(tmp_path / "run", tensorboard_dir="tb\x00x")
    assert list(tmp_path.iterdir()) == []  # before: run/ made, then "embedded null byte"


def test_an_escape_in_out_dir_is_refused_and_a_joiner_in_a_word_is_not(tmp_path: Path) -> None:
    for name in ("run\x1b[2Jx", "run\u202egpj"):  # an ESC drives the terminal; a bidi override
        said = f"SpikeMonitor: out_dir {str(tmp_path / name)!r} holds a control or invisible"
        with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
            _monitor(tmp_path / name)
    assert list(tmp_path.iterdir()) == []  # before: both folders made
    mon = _monitor(tmp_path / "گزارش\u200cها")  # ZWNJ: Persian text, not a hidden character
    assert Path(mon.run_dir).name == "گزارش\u200cها"


def test_a_numpy_array_or_a_range_is_a_list_of_values_to_a_spec() -> None:
    # both ran through cells() before the spec checks (review finding: over-refused)
    import numpy as np

    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.sweep import SweepSpec

    spec = SweepSpec(base=RunConfig(size="tiny"), lrs=np.logspace(-4, -2, 3), seeds=range(3))
    assert spec.seeds == [0, 1, 2] and all(type(x) is int for x in spec.seeds)
    assert len(spec.lrs) == 3 and all(type(x) is float for x in spec.lrs)
