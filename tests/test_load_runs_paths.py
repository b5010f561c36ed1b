"""``load_runs`` takes one path as one run (a ``str`` was read as its characters) and refuses
a run named twice (its rows would be counted twice)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from monitor_helpers import monitored_update

from andrea_diag.monitor import SpikeMonitor
from andrea_diag.runs import load_runs


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with SpikeMonitor(model, opt, tmp_path / "mine", shadow=False, lockin=False) as mon:
        for _ in range(2):
            monitored_update(mon, opt, model(torch.randn(4, 3)).square().mean())
    return tmp_path / "mine"


@pytest.mark.parametrize("as_type", [str, Path])
def test_a_single_path_is_read_as_one_run(run_dir: Path, as_type: type) -> None:
    df = load_runs(as_type(run_dir))
    assert df["run"].unique().tolist() == ["mine"]
    assert df["update"].tolist() == [1, 2]


@pytest.mark.parametrize(
    "second", [lambda p: p, lambda p: str(p), lambda p: p / ".." / p.name, lambda p: f"{p}/"]
)
def test_the_same_run_named_twice_is_refused(run_dir: Path, second) -> None:
    with pytest.raises(ValueError, match="names the same run directory twice"):
        load_runs([run_dir, second(run_dir)])


def test_a_cascade_and_one_of_its_arms_are_refused_together(run_dir: Path) -> None:
    cascade = run_dir.parent / "c"
    cascade.mkdir()
    run_dir.rename(cascade / "mine")
    (cascade / "cascade.json").write_text('{"arms": ["mine"]}')
    assert load_runs(cascade)["arm"].unique().tolist() == [
        "mine"
    ]  # the arm, as cascade.json names it
    with pytest.raises(ValueError, match="names the same arm directory twice"):
        load_runs([cascade, cascade / "mine"])


def test_paths_that_are_not_paths_are_a_type_error(run_dir: Path) -> None:
    with pytest.raises(TypeError, match="load_runs takes run directories"):
        load_runs([run_dir, 5])
    with pytest.raises(TypeError, match="load_runs takes a path or a list of paths"):
        load_runs(5)
