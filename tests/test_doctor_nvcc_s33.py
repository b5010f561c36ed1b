"""``doctor`` said "ok" for an nvcc that timed out or exited non-zero (its detail read
"unreadable ..."): a build would then fail with no warning here. Now such an nvcc "fails",
with what it said (session 33's audit).

    pytest tests/test_doctor_nvcc_s33.py -q
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from andrea_diag.commands import doctor


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvcc"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_an_nvcc_that_exits_non_zero_fails(tmp_path: Path) -> None:
    works, said = doctor.nvcc_status(_script(tmp_path, 'echo "bad \\033[31m" >&2\nexit 3\n'))
    assert not works
    assert said == "--version exited 3: bad \\x1b[31m"  # a control character shown, not sent


def test_an_nvcc_without_a_release_line_fails(tmp_path: Path) -> None:
    works, said = doctor.nvcc_status(_script(tmp_path, "exit 0\n"))
    assert (works, said) == (False, "--version exited 0, saying no release")


def test_an_nvcc_that_times_out_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired("nvcc", 30)

    monkeypatch.setattr(doctor.subprocess, "run", slow)
    works, said = doctor.nvcc_status("/x/nvcc")
    assert not works and said.startswith("does not run (Command 'nvcc' timed out after 30")


def test_a_working_nvcc_gives_its_release_line(tmp_path: Path) -> None:
    body = 'echo "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 13.0, V13.0.48"\n'
    assert doctor.nvcc_status(_script(tmp_path, body)) == (
        True, "Cuda compilation tools, release 13.0, V13.0.48")  # fmt: skip
