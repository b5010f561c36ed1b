"""One owner per rule (round 31): the command line asks the specs' and registries' own checks,
named by its flags, where it restated their comparisons.

- ``--clip``'s arm count and a grid's arm count: ``spec_checks.check_counts`` (the comparison
  of ``MAX_ARMS`` and ``MAX_SWEEP_ROWS`` with the lists' lengths), not a copy in
  ``commands/run.py``.
- ``--clip``'s modes: the clipper registry at call time (``config_checks.check_clip_mode``),
  not a list taken once at import.
- An executor's settings: ``executor_config.check_settings``, for the object when made, its
  ``check()``, a spec and the command line.

Each test changes the owner's limit or list and sees the command line follow it.

python -m pytest -q -p no:cacheprovider tests/test_one_owner_s31.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

from andrea_diag.clip.modes import CLIPPERS


def test_the_cli_arm_limit_is_the_specs_own_comparison(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    monkeypatch.setattr("andrea_diag.experiments.spec_checks.MAX_ARMS", 2)
    for command in ("cascade", "sweep"):
        line = refused([command, "--clip", "none,global,agc"], monkeypatch, empty)
        assert line == "error: --clip lists 3 arms, more than a cascade runs (2)"


def test_the_cli_grid_limit_is_the_specs_own_comparison(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    monkeypatch.setattr("andrea_diag.experiments.spec_checks.MAX_SWEEP_ROWS", 7)
    line = refused(["sweep", "--lr", "1e-3,1e-2", "--seed", "0,1"], monkeypatch, empty)
    assert line == "error: the grid (--lr, --seed x --clip) is 8 arms, more than a sweep runs (7)"


def test_the_cli_clip_modes_are_the_registrys_at_call_time(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    monkeypatch.delitem(CLIPPERS, "agc")
    line = refused(["cascade", "--clip", "none,agc"], monkeypatch, empty)
    assert line == "error: unknown clip mode 'agc'"


def test_the_cli_executor_bounds_are_the_configs_own_comparison(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    from andrea_diag.experiments import executor_config

    monkeypatch.setitem(executor_config.EXECUTOR_BOUNDS, "gpus", (0, 1))
    monkeypatch.setattr(executor_config, "check_submitit", lambda kind: None)
    line = refused(["sweep", "--executor", "slurm", "--slurm-gpus", "2"], monkeypatch, empty)
    assert line == "error: --slurm-gpus must be from 0 to 1, got 2"
