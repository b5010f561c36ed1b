"""Bad input to the experiments' Python API, refused where it is given (round 31, from a
bad-input audit and the known gaps of round 30):

- ``ExecutorConfig(jobs=0)`` (a bool or float for a count, an unknown kind or MPS mode, a
  blank partition, a setting its kind never reads) was taken when made and refused only by a
  spec or by ``check()``, at run time; ``ExecutorConfig(jobs=np.int64(3))`` kept numpy's type.
- ``CascadeSpec``/``SweepSpec``/``LadderSpec`` checked their base config (a nan, an unknown clip
  mode, a value one of a grid's sizes cannot take) only when run.
- ``CascadeSpec(resume=True)`` with no ``out`` looked for a run in ``runs/cascade-<now>`` and
  said that folder was no cascade, after preparing the data.
- A base field the spec sets per arm or cell (``SweepSpec(base=RunConfig(lr=5e-2))``,
  ``CascadeSpec(base=RunConfig(clip="zclip"))``) was silently replaced by the spec's values.
- A clip setting no arm reads (``SweepSpec(clips=["none"], max_norms=[0.5, 1.0])`` trained one
  cell twice; ``base.clip_params.zclip_z`` with no zclip arm) was silently unread, where the
  CLI refused ``--max-norm``/``--zclip-z`` typed for such arms.
- ``run_sweep`` of CPU cells with ``ExecutorConfig(jobs=2, mps="on")`` made the sweep's folder
  and ``sweep.json``, then failed starting MPS (the CLI refused it first).
- ``--executor slurm --slurm-partition "gpu<ESC>[2J"`` passed the command line's checks and was
  refused by the spec in the API's words (``SweepSpec: executor: partition``), after submitit's.

python -m pytest -q -p no:cacheprovider tests/test_bad_input_s31_specs.py
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

from andrea_diag.clip_params import ClipParams
from andrea_diag.config import RunConfig
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.experiments.ladder import LadderSpec
from andrea_diag.experiments.sweep import SweepSpec, run_sweep

BASE = {"size": "tiny", "steps": 2, "device": "cpu"}

# -- 1. an ExecutorConfig is checked when made --------------------------------------------


@pytest.mark.parametrize(
    ("given", "error", "said"),
    [({"jobs": True}, BadType, "ExecutorConfig: jobs must be an int, got bool True"),
     ({"jobs": 2.0}, BadType, "ExecutorConfig: jobs must be an int, got float 2.0"),
     ({"jobs": 0}, BadArgument, "ExecutorConfig: jobs must be from 1 to 256, got 0"),
     ({"jobs": 10**6}, BadArgument, "ExecutorConfig: jobs must be from 1 to 256"),
     ({"jobs": 10**5000}, BadArgument,  # str() of it raises past 4,300 digits
      "ExecutorConfig: jobs must be from 1 to 256, got an integer of 5001 digits"),
     ({"kind": "slurmm"}, BadArgument, "ExecutorConfig: unknown kind 'slurmm'"),
     ({"mps": "yes"}, BadArgument, "ExecutorConfig: unknown mps 'yes'"),
     ({"kind": "slurm", "gpus": -1}, BadArgument, "ExecutorConfig: gpus must be from 0 to 64"),
     ({"kind": "slurm", "time_min": 0}, BadArgument, "ExecutorConfig: time_min must be from 1"),
     ({"kind": "slurm", "partition": " "}, BadArgument,
      "ExecutorConfig: partition ' ' is blank or holds a control character"),
     ({"kind": "slurm", "partition": "gpu\x1b[2J"}, BadArgument, "ExecutorConfig: partition"),
     ({"partition": "gpu"}, BadArgument,
      "ExecutorConfig: partition has no effect with kind 'local'"),
     ({"time_min": 10}, BadArgument, "ExecutorConfig: time_min has no effect with kind 'local'"),
     ({"kind": "slurm", "mps": "on"}, BadArgument,
      "ExecutorConfig: mps has no effect with kind 'slurm'")],
    ids=["bool-jobs", "float-jobs", "no-jobs", "million-jobs", "5001-digit-jobs", "unknown-kind",
         "unknown-mps", "negative-gpus", "no-time", "blank-partition", "escape-partition",
         "partition-unused", "time-unused", "mps-unused"],
)  # fmt: skip
def test_a_bad_executor_config_is_refused_when_made(
    given: dict[str, Any], error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}") as info:
        ExecutorConfig(**given)
    assert isinstance(info.value, UserError)  # the CLI's one line too


def test_an_executor_config_makes_numpy_counts_python_ints_when_made() -> None:
    ex = ExecutorConfig(kind="slurm", jobs=np.int64(3), gpus=np.int32(2), time_min=np.int16(30))
    assert (ex.jobs, ex.gpus, ex.time_min) == (3, 2, 30)
    assert {type(v) for v in (ex.jobs, ex.gpus, ex.time_min)} == {int}


def test_check_still_names_the_flags_for_a_field_set_after_the_config_was_made() -> None:
    ex = ExecutorConfig()
    ex.jobs = 0
    with pytest.raises(UserError, match=r"^--jobs must be from 1 to 256 \(or auto\), got 0$"):
        ex.check()
    ex.jobs, ex.kind = 1, "pbs"
    with pytest.raises(UserError, match=r"^unknown --executor 'pbs'$"):
        ex.check()


def test_a_spec_refuses_an_executor_field_set_after_it_was_made_before_any_folder(
    tmp_path: Path,
) -> None:
    spec = SweepSpec(base=RunConfig(**BASE), lrs=[1e-3], clips=["none"], out=tmp_path / "s")
    spec.executor.jobs = 0
    with pytest.raises(BadArgument, match=r"^SweepSpec: executor: jobs must be from 1 to 256"):
        run_sweep(spec)
    assert list(tmp_path.iterdir()) == []


def test_an_executor_of_the_wrong_type_is_named_with_its_article() -> None:
    with pytest.raises(BadType, match=r"^SweepSpec: executor must be an ExecutorConfig, got dict"):
        SweepSpec(executor={"jobs": 2})  # type: ignore[arg-type]


# -- 2. a spec's base config is checked when the spec is made -----------------------------

NAN = {"mixer_sharpness": math.nan}


@pytest.mark.parametrize(
    ("make", "error", "said"),
    [(lambda: CascadeSpec(base=RunConfig(**BASE, **NAN)), ValueError,
      "mixer_sharpness must be a finite number, got nan"),
     (lambda: CascadeSpec(base=RunConfig(**BASE), clips=["none", "bogus"]), ValueError,
      "unknown clip mode 'bogus'"),
     (lambda: SweepSpec(base=RunConfig(**BASE, **NAN), lrs=[1e-3]), ValueError,
      "mixer_sharpness must be a finite number, got nan"),
     (lambda: SweepSpec(base=RunConfig(**BASE), clips=["none", "bogus"]), ValueError,
      "unknown clip mode 'bogus'"),
     (lambda: LadderSpec(base=RunConfig(**NAN), sizes=["tiny", "12m"]), ValueError,
      "mixer_sharpness must be a finite number, got nan"),
     (lambda: LadderSpec(sizes=["tiny", "12m"], clips=["none", "bogus"]), ValueError,
      "unknown clip mode 'bogus'")],
    ids=["cascade-nan", "cascade-clip", "sweep-nan", "sweep-clip", "ladder-nan", "ladder-clip"],
)  # fmt: skip
def test_a_base_config_no_arm_can_run_is_refused_when_the_spec_is_made(
    make: Any, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}") as info:
        make()
    assert isinstance(info.value, UserError)


def test_a_base_config_one_size_of_the_grid_cannot_take_is_refused_when_made() -> None:
    base = RunConfig(seq_len=512)  # 12m's block is 1,024 positions, tiny's 128
    assert SweepSpec(base=base, sizes=["12m"]).sizes == ["12m"]
    with pytest.raises(UserError, match="exceeds the tiny block size 128"):
        SweepSpec(base=base, sizes=["12m", "tiny"])
    with pytest.raises(UserError, match="exceeds the tiny block size 128"):
        LadderSpec(base=base, sizes=["12m", "tiny"])


def test_a_base_config_made_bad_after_the_spec_is_still_refused_before_any_folder(
    tmp_path: Path,
) -> None:
    spec = CascadeSpec(base=RunConfig(**BASE), out=tmp_path / "c")
    spec.base.mixer_sharpness = math.nan
    with pytest.raises(ValueError, match=r"^mixer_sharpness must be a finite number"):
        run_cascade(spec)
    assert list(tmp_path.iterdir()) == []


# -- 3. contradictory or silently replaced fields ------------------------------------------


def test_resume_without_the_runs_folder_is_refused_when_the_spec_is_made() -> None:
    with pytest.raises(BadArgument, match=r"^CascadeSpec: resume=True continues the run in out"):
        CascadeSpec(base=RunConfig(**BASE), resume=True)


@pytest.mark.parametrize(
    ("make", "said"),
    [(lambda: CascadeSpec(base=RunConfig(clip="zclip")),
      "CascadeSpec: base.clip 'zclip' is not one of clips: each arm's clip is set by clips"),
     (lambda: CascadeSpec(base=RunConfig(arm="mine")),
      "CascadeSpec: base.arm 'mine' is not one of clips"),
     (lambda: SweepSpec(base=RunConfig(lr=5e-2)),
      "SweepSpec: base.lr 0.05 is not one of lrs: each cell's lr is set by lrs"),
     (lambda: SweepSpec(base=RunConfig(seed=3)), "SweepSpec: base.seed 3 is not one of seeds"),
     (lambda: SweepSpec(base=RunConfig(size="12m")),
      "SweepSpec: base.size '12m' is not one of sizes"),
     (lambda: LadderSpec(base=RunConfig(precision="bf16")),
      "LadderSpec: base.precision 'bf16' is not one of precisions"),
     (lambda: LadderSpec(base=RunConfig(max_norm=0.5)),
      "LadderSpec: base.max_norm 0.5 is not one of max_norms")],
    ids=["cascade-clip", "cascade-arm", "sweep-lr", "sweep-seed", "sweep-size",
         "ladder-precision", "ladder-max-norm"],
)  # fmt: skip
def test_a_base_field_the_spec_sets_per_arm_or_cell_is_refused_not_silently_replaced(
    make: Any, said: str
) -> None:
    with pytest.raises(BadArgument, match=f"^{re.escape(said)}"):
        make()


def test_a_base_field_at_its_default_or_among_the_specs_values_is_taken() -> None:
    assert CascadeSpec(base=RunConfig(clip="global")).clips == ["none", "global"]
    assert SweepSpec(base=RunConfig(lr=1e-3, size="12m"), sizes=["tiny", "12m"]).lrs[1] == 1e-3
    assert LadderSpec(base=RunConfig(size="30m", seed=2)).seeds == [0, 1, 2]


@pytest.mark.parametrize(
    ("make", "said"),
    [(lambda: SweepSpec(clips=["none"], max_norms=[0.5, 1.0]),
      "SweepSpec: max_norms is used by clips global or per-tensor only, not none"),
     (lambda: CascadeSpec(base=RunConfig(max_norm=2.0), clips=["none", "zclip"]),
      "CascadeSpec: base.max_norm is used by clips global or per-tensor only, not none,zclip"),
     (lambda: CascadeSpec(base=RunConfig(clip_params=ClipParams(zclip_z=3.0))),
      "CascadeSpec: base.clip_params.zclip_z is used by clips zclip only, not none,global"),
     (lambda: LadderSpec(base=RunConfig(clip_params=ClipParams(spam_reset=100))),
      "LadderSpec: base.clip_params.spam_reset is used by clips spam only, not none,global")],
    ids=["sweep-max-norms", "cascade-max-norm", "cascade-zclip", "ladder-spam"],
)  # fmt: skip
def test_a_clip_setting_no_arm_reads_is_refused_as_the_cli_refuses_it(make: Any, said: str) -> None:
    with pytest.raises(BadArgument, match=f"^{re.escape(said)}"):
        make()


def test_a_clip_setting_an_arm_reads_is_taken_and_a_resumed_run_keeps_its_own() -> None:
    zclip = RunConfig(max_norm=2.0, clip_params=ClipParams(zclip_z=3.0))
    assert CascadeSpec(base=zclip, clips=["global", "zclip"]).clips == ["global", "zclip"]
    assert SweepSpec(max_norms=[0.5, 1.0]).clips == ["none", "global"]
    kept = CascadeSpec(base=RunConfig(max_norm=2.0), clips=["none"], out=Path("r"), resume=True)
    assert kept.base.max_norm == 2.0  # made before the rule: it still continues


def test_mps_on_for_cpu_cells_is_refused_by_run_sweep_before_the_folder(tmp_path: Path) -> None:
    spec = SweepSpec(base=RunConfig(**BASE), lrs=[1e-3], clips=["none"], out=tmp_path / "s",
                     executor=ExecutorConfig(jobs=2, mps="on"))  # fmt: skip
    with pytest.raises(UserError, match=r"^--mps on needs cells on a CUDA device"):
        run_sweep(spec)
    assert list(tmp_path.iterdir()) == []  # before: the sweep's folder and sweep.json


# -- 4. the command line names the flag ---------------------------------------------------


@pytest.mark.parametrize("partition", ["gpu\x1b[2J", "gpu\u202e"])
def test_a_slurm_partition_with_a_control_character_is_one_line_naming_the_flag(
    partition: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    monkeypatch.setattr("andrea_diag.experiments.executor_config.check_submitit", lambda k: None)
    line = refused(["sweep", "--executor", "slurm", "--slurm-partition", partition],
                   monkeypatch, empty)  # fmt: skip
    assert line.startswith("error: --slurm-partition ") and "is blank or holds a control" in line
