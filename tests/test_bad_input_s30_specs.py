"""Bad input to the experiment specs and the commands that build them, refused in one line
before any work (round 30, from a bad-input audit):

- ``SweepSpec(plotly="sharde")`` (a typo of ``shared``; a ``LadderSpec`` too) was taken, and
  every page then inlined plotly.js without a word. A spec's choice field is now checked where
  the spec is made (``spec_checks.CHOICES``), against the same list ``--plotly`` takes.
- ``CascadeSpec`` with more arms than a run directory may list (``runread.MAX_ARMS``) trained
  every arm, and then the report refused the run's own ``cascade.json`` as damaged; the CLI's
  ``--clip`` of 1,001 items said only that its first was unknown. Both now say the limit. A
  grid past ``sweep.csv``'s rows (``sweep_table.MAX_SWEEP_ROWS``) is refused the same way,
  and the command line says so before it resolves a config per value.
- A value listed twice was looked for by comparing each item with all before it: a list of
  100,000 seeds took minutes to be told it was too long.
- ``RunConfig(mixer="exp3", mixer_sharpness=8.0)`` (and a spec holding it) trained with the
  sharpness silently ignored; the CLI refused ``--mixer exp3 --mixer-sharpness``. The config
  now refuses it where it is made, so both say the same line, and an exp3 config records no
  sharpness instead of a preset's value it never read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_refusals import empty_fixture, refused, runner  # noqa: F401 (empty)

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.data.bandit import Mixer
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.experiments.ladder import LadderSpec
from andrea_diag.experiments.spec_checks import CHOICES
from andrea_diag.experiments.sweep import SweepSpec
from andrea_diag.runread import MAX_ARMS
from andrea_diag.sweep_table import MAX_SWEEP_ROWS

# -- 1. a spec's choice field ---------------------------------------------------------------


@pytest.mark.parametrize("spec", [SweepSpec, LadderSpec])
@pytest.mark.parametrize("value", ["sharde", "", "Shared", "inline "])
def test_a_plotly_mode_no_page_knows_is_refused_when_the_spec_is_made(
    spec: Any, value: str
) -> None:
    with pytest.raises(BadArgument, match=r"plotly must be one of inline, shared, got"):
        spec(plotly=value)


@pytest.mark.parametrize("spec", [SweepSpec, LadderSpec])
def test_a_plotly_mode_of_the_wrong_type_is_a_type_error(spec: Any) -> None:
    with pytest.raises(BadType, match=r"plotly must be a str, got int"):
        spec(plotly=3)


@pytest.mark.parametrize("value", ["inline", "shared"])
def test_each_plotly_mode_the_pages_know_is_taken(value: str) -> None:
    assert SweepSpec(plotly=value).plotly == value
    assert LadderSpec(plotly=value).plotly == value


def test_the_specs_plotly_modes_are_the_ones_the_pages_read() -> None:
    from andrea_diag.experiments.sweep import shared_plotly

    shared = [m for m in CHOICES["plotly"] if shared_plotly(m, Path("out")) is not None]
    assert shared == ["shared"]  # the one mode the pages read as "one copy in the folder"


def test_a_plotly_typo_set_after_the_spec_was_made_is_refused_by_the_sweep(
    tmp_path: Path,
) -> None:
    from andrea_diag.experiments.sweep import run_sweep

    spec = SweepSpec(base=RunConfig(steps=2, device="cpu"), lrs=[1e-3], out=tmp_path / "s")
    spec.plotly = "sharde"
    with pytest.raises(BadArgument, match="plotly must be one of"):
        run_sweep(spec)
    assert list(tmp_path.iterdir()) == []


# -- 2. how many arms ------------------------------------------------------------------------

MANY = [f"a{i}" for i in range(MAX_ARMS + 1)]


@pytest.mark.parametrize("spec", [CascadeSpec, SweepSpec, LadderSpec])
def test_more_arms_than_a_cascade_runs_are_refused_when_the_spec_is_made(spec: Any) -> None:
    with pytest.raises(BadArgument, match=f"clips lists {MAX_ARMS + 1:,} arms, more than a "
                                          f"cascade runs \\({MAX_ARMS:,}\\)"):  # fmt: skip
        spec(clips=["none", *MANY[1:]])


def test_more_arms_set_after_the_spec_was_made_are_refused_before_any_folder(
    tmp_path: Path,
) -> None:
    spec = CascadeSpec(base=RunConfig(steps=2, device="cpu"), out=tmp_path / "c")
    spec.clips = MANY
    with pytest.raises(BadArgument, match="more than a cascade runs"):
        run_cascade(spec)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["cascade", "train", "sweep", "ladder"])
def test_the_cli_refuses_more_arms_than_a_cascade_runs_with_the_apis_limit(
    command: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused([command, "--clip", ",".join(MANY)], monkeypatch, empty)
    assert f"--clip lists {MAX_ARMS + 1:,} arms, more than a cascade runs ({MAX_ARMS:,})" in line


def test_a_grid_past_the_rows_of_sweep_csv_is_refused_when_the_spec_is_made() -> None:
    seeds = list(range(MAX_SWEEP_ROWS // 2 + 1))  # x 2 arms
    with pytest.raises(BadArgument, match=f"is {2 * len(seeds):,} arms .* more than a sweep runs"):
        SweepSpec(lrs=[1e-3], seeds=seeds)
    SweepSpec(lrs=[1e-3], seeds=seeds[:-1])  # exactly the limit: taken


@pytest.mark.parametrize("command", ["sweep", "ladder"])
def test_the_cli_refuses_a_grid_past_the_rows_of_sweep_csv_before_checking_each_value(
    command: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    checked: list[Any] = []
    monkeypatch.setattr("andrea_diag.commands.run.checked", checked.append)
    values = ",".join(f"{1e-3 * (1 + i / 1000):g}" for i in range(500))
    seeds = ",".join(str(i) for i in range(500))  # 500 x 500 x 2 arms: 500,000
    line = refused([command, "--size", "tiny,12m", "--lr", values, "--seed", seeds],
                   monkeypatch, empty)  # fmt: skip
    assert "the grid (--size, --lr, --seed x --clip) is 1,000,000 arms" in line
    assert f"more than a sweep runs ({MAX_SWEEP_ROWS:,})" in line
    assert checked == []  # refused before any value was resolved


def test_a_long_list_is_told_its_value_twice_without_comparing_every_pair() -> None:
    seeds = [*range(150_000), 149_999]  # within the grid's limit with one arm
    with pytest.raises(BadArgument, match="seeds lists 149999 twice"):
        SweepSpec(lrs=[1e-3], clips=["none"], seeds=seeds)


# -- 3. the exp3 mixer reads no sharpness ---------------------------------------------------


@pytest.mark.parametrize("sharpness", [8.0, 1.0, 4.0])
def test_a_sharpness_for_the_exp3_mixer_is_refused_where_the_config_is_made(
    sharpness: float,
) -> None:
    with pytest.raises(BadArgument, match=r"mixer_sharpness.*seeded mixer only.*exp3 ignores"):
        RunConfig(mixer="exp3", mixer_sharpness=sharpness)


def test_the_python_api_and_the_cli_refuse_exp3_sharpness_in_the_same_words(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    with pytest.raises(BadArgument) as info:
        RunConfig(mixer="exp3", mixer_sharpness=2.0)
    line = refused(["train", "--mixer", "exp3", "--mixer-sharpness", "2"], monkeypatch, empty)
    assert line == f"error: {info.value.message}"


def test_an_exp3_config_records_no_sharpness_and_a_seeded_one_its_presets() -> None:
    exp3 = RunConfig(mixer="exp3").resolve()
    assert exp3.mixer_sharpness is None
    assert exp3.resolve().mixer_sharpness is None  # resolving twice changes nothing
    assert RunConfig().resolve().mixer_sharpness == 4.0  # tiny's preset, unchanged


def test_an_exp3_run_saved_with_a_sharpness_it_never_read_still_loads(tmp_path: Path) -> None:
    saved = RunConfig(mixer="exp3").resolve().to_dict()
    saved["mixer_sharpness"] = 4.0  # what earlier versions recorded for tiny
    cfg = RunConfig.from_dict(json.loads(json.dumps(saved)))
    assert cfg.mixer == "exp3" and cfg.mixer_sharpness is None
    assert cfg.resolve().to_dict() == RunConfig(mixer="exp3").resolve().to_dict()


def test_a_mixer_refuses_a_sharpness_under_exp3_and_one_that_is_no_number() -> None:
    with pytest.raises(UserError, match="seeded mixer only, not exp3"):
        Mixer(0, "exp3", sharpness=2.0)
    with pytest.raises(BadType, match="mixer sharpness must be a number, got str"):
        Mixer(0, sharpness="2")
    assert Mixer(0, "exp3").sharpness == 1.0 and Mixer(0, sharpness=None).sharpness == 1.0


def test_run_cascade_with_exp3_and_a_sharpness_set_later_is_refused_before_any_folder(
    tmp_path: Path,
) -> None:
    spec = CascadeSpec(base=RunConfig(mixer="exp3", steps=2, device="cpu"), out=tmp_path / "c")
    spec.base.mixer_sharpness = 8.0  # a field set after the config was made
    with pytest.raises(UserError, match="seeded mixer only"):
        run_cascade(spec)
    assert list(tmp_path.iterdir()) == []


def test_an_exp3_cli_run_without_a_sharpness_still_reaches_training(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("andrea_diag.commands.run.run_cascade", lambda spec, c: seen.append(spec))
    monkeypatch.chdir(empty)
    runner.invoke(app, ["train", "--mixer", "exp3", "--out", "o"])
    assert seen and seen[0].base.mixer == "exp3" and seen[0].base.mixer_sharpness is None


# -- 4. each value of a grid's axis, and how its cells run ----------------------------------


@pytest.mark.parametrize(
    ("axes", "said"),
    [({"lrs": [1e-3, float("nan")]}, "SweepSpec: each of lrs must be a positive number, got nan"),
     ({"lrs": [-1.0]}, "SweepSpec: each of lrs must be a positive number, got -1.0"),
     ({"max_norms": [0.0]}, "SweepSpec: each of max_norms must be a positive number, got 0.0"),
     ({"max_norms": [float("inf")]}, "SweepSpec: each of max_norms must be a positive number"),
     ({"seeds": [-1]}, "SweepSpec: each of seeds must be 0 or more, got -1"),
     ({"seeds": [2**40]}, "SweepSpec: each of seeds must be at most 4294967295"),
     ({"sizes": ["tiny", "huge"]}, "SweepSpec: sizes holds an unknown size 'huge'"),
     ({"sizes": [""]}, "SweepSpec: sizes holds an unknown size ''")],
    ids=["nan-lr", "negative-lr", "zero-max-norm", "inf-max-norm", "negative-seed", "huge-seed",
         "unknown-size", "blank-size"],
)  # fmt: skip
def test_an_axis_value_no_cell_takes_is_refused_when_the_spec_is_made(
    axes: dict[str, Any], said: str
) -> None:
    with pytest.raises(BadArgument, match=f"^{re.escape(said)}"):
        SweepSpec(**axes)


def test_an_unknown_precision_on_an_axis_is_its_registrys_error_when_the_spec_is_made() -> None:
    from andrea_diag.train.components import UnknownPrecision

    with pytest.raises(UnknownPrecision, match="fp8"):
        LadderSpec(precisions=["fp32", "fp8"])


def test_numpy_axis_values_in_range_are_still_taken() -> None:
    spec = SweepSpec(lrs=[np.float32(1e-3)], seeds=[np.int64(7)], max_norms=[np.float64(0.5)])
    assert spec.seeds == [7] and type(spec.seeds[0]) is int and spec.max_norms == [0.5]


@pytest.mark.parametrize(
    ("executor", "error", "said"),
    [({"jobs": True}, BadType, "ExecutorConfig: jobs must be an int, got bool True"),
     ({"jobs": 2.0}, BadType, "ExecutorConfig: jobs must be an int, got float 2.0"),
     ({"jobs": 0}, BadArgument, "ExecutorConfig: jobs must be from 1 to 256, got 0"),
     ({"jobs": 10**6}, BadArgument, "ExecutorConfig: jobs must be from 1 to 256"),
     ({"kind": "slurmm"}, BadArgument, "ExecutorConfig: unknown kind 'slurmm'"),
     ({"mps": "yes"}, BadArgument, "ExecutorConfig: unknown mps 'yes'"),
     ({"kind": "slurm", "gpus": -1}, BadArgument, "ExecutorConfig: gpus must be from 0"),
     ({"kind": "slurm", "partition": " "}, BadArgument, "ExecutorConfig: partition ' ' is "
      "blank"),
     ({"kind": "slurm", "partition": "gpu\x1b"}, BadArgument, "ExecutorConfig: partition"),
     ({"partition": "gpu"}, BadArgument,
      "ExecutorConfig: partition has no effect with kind 'local'"),
     ({"time_min": 10}, BadArgument,
      "ExecutorConfig: time_min has no effect with kind 'local'"),
     ({"kind": "slurm", "mps": "on"}, BadArgument,
      "ExecutorConfig: mps has no effect with kind 'slurm'")],
    ids=["bool-jobs", "float-jobs", "no-jobs", "million-jobs", "unknown-kind", "unknown-mps",
         "negative-gpus", "blank-partition", "escape-partition", "partition-unused",
         "time-unused", "mps-unused"],
)  # fmt: skip
def test_an_executor_setting_no_run_takes_or_reads_is_refused_when_the_spec_is_made(
    executor: dict[str, Any], error: type[Exception], said: str
) -> None:
    from andrea_diag.experiments.executor import ExecutorConfig

    # refused where the ExecutorConfig is made (round 31), before any spec holds it
    with pytest.raises(error, match=f"^{re.escape(said)}"):
        SweepSpec(executor=ExecutorConfig(**executor))
    with pytest.raises(error):
        LadderSpec(executor=ExecutorConfig(**executor))


def test_an_executor_the_spec_takes_keeps_its_settings_and_numpy_jobs_are_an_int() -> None:
    from andrea_diag.experiments.executor import ExecutorConfig

    spec = SweepSpec(
        executor=ExecutorConfig(kind="slurm", partition="gpu", gpus=2, jobs=np.int64(3))
    )
    assert spec.executor.partition == "gpu" and spec.executor.gpus == 2
    assert spec.executor.jobs == 3 and type(spec.executor.jobs) is int


def test_the_cli_still_names_the_flag_an_executor_never_reads(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["sweep", "--slurm-partition", "gpu"], monkeypatch, empty)
    assert line == "error: --slurm-partition has no effect with --executor local"


@pytest.mark.parametrize(
    ("sizes", "said"),
    [(["tiny"], "a ladder needs at least two sizes"), (["tiny", "tiny"], "lists .tiny. twice"),
     (["tiny", "huge"], "unknown size 'huge'")],
)  # fmt: skip
def test_a_ladder_of_one_size_or_an_unknown_one_is_refused_when_the_spec_is_made(
    sizes: list[str], said: str
) -> None:
    with pytest.raises(UserError, match=said):
        LadderSpec(sizes=sizes, clips=["none", "global"])
    assert LadderSpec(sizes=["tiny", "12m"], clips=["none", "global"]).sizes == ["tiny", "12m"]
