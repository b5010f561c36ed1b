"""An optional extra that is installed but fails to import is one line that names it, not a
traceback (optional_deps.py). A protobuf too new for the installed wandb or tensorboard raises
``TypeError: Descriptors cannot be created directly`` while the package imports, and a package
whose own dependency is missing raises ``ModuleNotFoundError`` for that other name; every
caller caught only ``ImportError`` of the package itself. Each case runs the real command in a
fresh interpreter with a stand-in package first on ``PYTHONPATH``.

    pytest tests/test_optional_deps_s33.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_diag.errors import UserError
from andrea_diag.optional_deps import optional_module

PROTOBUF = 'raise TypeError("Descriptors cannot be created directly.\\nIf this call came ...")\n'
MISSING_DEP = "import google.protobuf_not_here\n"


def _stub(root: Path, package: str, body: str) -> Path:
    (root / package).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text(body)
    return root


def _cli(stubs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stubs), os.getcwd()]),
           "WANDB_MODE": "offline", "WANDB_SILENT": "true", "COLUMNS": "200"}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "andrea_diag.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, make_run) -> Path:
    return make_run(tmp_path_factory.mktemp("r") / "run")


@pytest.mark.parametrize(
    ("flag", "package"),
    [
        (["--wandb"], "wandb"),
        (["--mlflow", "STORE"], "mlflow"),
        (["--tensorboard"], "tensorboardX"),
    ],
)
@pytest.mark.parametrize("body", [PROTOBUF, MISSING_DEP], ids=["raises", "its-dependency-missing"])
def test_a_broken_extra_is_one_line_naming_it(
    tmp_path: Path, run_dir: Path, flag: list[str], package: str, body: str
) -> None:
    stubs = _stub(tmp_path / "stubs", package, body)
    args = [a.replace("STORE", str(tmp_path / "mlruns")) for a in flag]
    res = _cli(stubs, "export", str(run_dir), *args, "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith(f"error: {package} is installed but fails to import ("), lines
    assert lines[-1].startswith("hint: repair it"), lines
    assert not (tmp_path / "mlruns").exists()


def test_an_absent_extra_keeps_its_install_line(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        optional_module("andrea_no_such_pkg.sub", missing="this sink needs x", hint="pip it")
    assert (e.value.message, e.value.hint) == ("this sink needs x", "pip it")


def test_a_broken_submitit_is_one_line_before_the_sweep(tmp_path: Path) -> None:
    stubs = _stub(tmp_path / "stubs", "submitit", PROTOBUF)
    out = tmp_path / "sweep"
    res = _cli(stubs, "sweep", "--size", "tiny", "--steps", "2", "--lr", "1e-3", "--seed", "0",
               "--executor", "submitit-local", "--device", "cpu", "--out", str(out))  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert (
        "error: submitit is installed but fails to import (TypeError: Descriptors cannot "
        "be created directly.)" in " ".join(res.stderr.split())
    ), res.stderr
    assert not out.exists()
