"""The launcher's environment (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_*``) is read
by one checked reader (train/distributed.py's ``env_world``): what torchrun or ``--nproc`` would
never set is one line before anything is written, not a traceback or a partial run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError
from andrea_diag.train.distributed import DistInfo, env_rank, env_world, env_world_size

LAUNCH_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def launch_env(monkeypatch: pytest.MonkeyPatch):
    """Set exactly the given launcher variables (the others unset)."""

    def set_env(**values: str) -> None:
        for name in LAUNCH_VARS:
            monkeypatch.delenv(name, raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


BAD_ENVS = [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' in the environment is not a whole number"),
    ({"WORLD_SIZE": "abc", "RANK": "0"}, "WORLD_SIZE='abc'"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' in the environment is not a whole number"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set in the environment but RANK is not"),
    ({"RANK": "5"}, "RANK=5 is set in the environment but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 in the environment is not below WORLD_SIZE=2"),
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0 in the environment"),
    ({"WORLD_SIZE": "-1", "RANK": "0"}, "WORLD_SIZE='-1'"),
    ({"WORLD_SIZE": " 2", "RANK": "0"}, "WORLD_SIZE=' 2'"),
    ({"WORLD_SIZE": "+2", "RANK": "0"}, "WORLD_SIZE='+2'"),
    ({"WORLD_SIZE": "\u0662", "RANK": "0"}, "is not a whole number"),  # Arabic-Indic two
    ({"WORLD_SIZE": "9" * 5000, "RANK": "0"}, "is not a whole number"),  # past int()'s limit
    (
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "x", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
        "LOCAL_RANK='x'",
    ),
    (
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
        "LOCAL_RANK=2 in the environment is not below WORLD_SIZE=2",
    ),
    ({"WORLD_SIZE": "2", "RANK": "1"}, "WORLD_SIZE=2 needs MASTER_ADDR and MASTER_PORT"),
    (
        {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
        "MASTER_PORT (a port from 1 to 65535)",
    ),
]


@pytest.mark.parametrize(("env", "message"), BAD_ENVS)
def test_a_launch_environment_no_launcher_sets_is_one_user_error(
    launch_env, env: dict[str, str], message: str
) -> None:
    launch_env(**env)
    with pytest.raises(UserError) as err:
        env_world()
    assert message in err.value.message
    with pytest.raises(UserError):
        env_rank()  # the rank is only known once the whole environment is checked


# rank 3 of 4, the second process on its host, as torchrun sets it
TORCHRUN_RANK_3 = {
    "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500",
}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, DistInfo()),
        ({"WORLD_SIZE": "1"}, DistInfo()),  # one process has one rank
        ({"WORLD_SIZE": "1", "RANK": "0"}, DistInfo()),
        ({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "junk"}, DistInfo()),  # unused at D = 1
        (TORCHRUN_RANK_3, DistInfo(3, 4, 1)),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, DistInfo(1, 2)),
    ],
)
def test_what_torchrun_and_nproc_set_is_read_as_before(
    launch_env, env: dict[str, str], want: DistInfo
) -> None:
    launch_env(**env)
    assert env_world() == want
    assert env_rank() == want.rank and env_world_size() == want.world_size


def test_the_world_size_alone_is_checked_for_the_preflight(launch_env) -> None:
    launch_env(WORLD_SIZE="2")  # check_runnable asks only how many: the pair is env_rank's
    assert env_world_size() == 2
    launch_env(WORLD_SIZE="two")
    with pytest.raises(UserError, match="WORLD_SIZE='two'"):
        env_world_size()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"),
        ({"RANK": "abc"}, "RANK='abc'"),
        ({"WORLD_SIZE": "2"}, "RANK is not"),
        ({"RANK": "5"}, "WORLD_SIZE is not"),  # ran a whole partial run, exit 0
    ],
)
@pytest.mark.parametrize("command", ["cascade", "train"])
def test_a_bad_launch_environment_stops_the_cli_before_the_run_dir_is_written(
    launch_env, tmp_path: Path, env: dict[str, str], message: str, command: str
) -> None:
    launch_env(**env)
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app, [command, "--size", "tiny", "--steps", "2", "--device", "cpu", "--out", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert isinstance(res.exception, SystemExit)
    assert not out.exists()


@pytest.mark.parametrize(
    ("env", "message"), [({"RANK": "abc"}, "RANK='abc'"), ({"WORLD_SIZE": "2"}, "RANK is not")]
)
def test_a_bad_launch_environment_stops_a_sweep_before_its_folder_is_written(
    launch_env, tmp_path: Path, env: dict[str, str], message: str
) -> None:
    """The sweep checks its cells (cascade.check_runnable) before sweep.json exists: the
    environment is read there too, not first in a cell that would crash after it."""
    launch_env(**env)
    out = tmp_path / "sweep"
    args = ["sweep", "--size", "tiny", "--steps", "2", "--seed", "0", "--device", "cpu"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_a_bad_launch_environment_leaves_no_bench_train_folder(launch_env, tmp_path: Path) -> None:
    launch_env(RANK="5")
    out = tmp_path / "bench"
    args = ["bench-train", "--device", "cpu", "--updates", "2", "--warmup", "1", "--block", "1"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "WORLD_SIZE is not" in res.output and not out.exists()
