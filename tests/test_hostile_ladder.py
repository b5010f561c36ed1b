"""A ladder directory is untrusted input too: a refused re-run leaves its files as they were,
and a damaged or planted ``sweep.json``/``sweep.csv`` is one line, never a hang or a traceback
(``experiments/ladder.py`` ``read_sweep_outputs``; only crashed cells let the ladder go on)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from finished_sweep import strict_cli as _run

from andrea_diag.errors import UserError
from andrea_diag.experiments.ladder import read_sweep_outputs

LADDER = ["ladder", "--size", "tiny,tiny2", "--lr", "1e-3", "--seed", "0", "--steps", "3",
          "--clip", "none,global", "--checkpoint-every", "0", "--device", "cpu"]  # fmt: skip
KEPT = ("ladder.json", "ladder.csv", "sweep.json", "sweep.csv")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ladder") / "l"
    code, output = _run(*LADDER, "--out", str(out))
    assert code == 0, output
    return out


@pytest.fixture
def ladder(finished: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "l", symlinks=True))


def _kept(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in KEPT}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "said"),
    [(["--steps", "4"], "steps"), (["--size", "tiny,tiny2,12m", "--steps", "4"], "steps")],
    ids=["other-steps", "a-rung-that-never-ran"],
)
def test_a_refused_ladder_rerun_leaves_the_ladders_statements_as_they_were(
    ladder: Path, change: list[str], said: str
) -> None:
    before = _kept(ladder)
    args = list(LADDER)
    for flag, value in zip(change[::2], change[1::2], strict=True):
        args[args.index(flag) + 1] = value
    code, output = _run(*args, "--out", str(ladder))
    assert code == 2 and output.count("error:") == 1 and said in output
    assert _kept(ladder) == before  # no ladder.json with a rung that never ran


@pytest.mark.slow
@pytest.mark.parametrize("text", ["[1]", "{", '"a string"'])
def test_a_damaged_sweep_json_in_a_ladder_is_one_line_on_a_rerun(ladder: Path, text: str) -> None:
    (ladder / "sweep.json").write_text(text)
    code, output = _run(*LADDER, "--out", str(ladder))
    assert code == 2 and output.count("error:") == 1 and "sweep.json" in output


@pytest.mark.slow
def test_the_ladders_sweep_files_are_read_as_untrusted_input(ladder: Path, tmp_path: Path) -> None:
    meta, table = read_sweep_outputs(ladder)  # the real thing reads
    assert meta["sizes"] and {"cell", "clip", "status"} <= set(table.columns)
    (ladder / "sweep.csv").unlink()
    os.mkfifo(ladder / "sweep.csv")  # open() would block for ever
    with pytest.raises(UserError, match=r"sweep\.csv"):
        read_sweep_outputs(ladder)
    (ladder / "sweep.csv").unlink()
    (ladder / "sweep.csv").write_text('cell,clip\n"unterminated\n')
    with pytest.raises(UserError, match=r"sweep\.csv"):
        read_sweep_outputs(ladder)
    outside = tmp_path / "outside.json"
    outside.write_text('{"sizes": ["tiny"]}')
    (ladder / "sweep.json").unlink()
    (ladder / "sweep.json").symlink_to(outside)
    with pytest.raises(UserError, match=r"sweep\.json"):
        read_sweep_outputs(ladder)
