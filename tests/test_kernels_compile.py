"""kernels/clip.cu compiles for sm_90 with plain nvcc (no torch headers): a seconds-long CI check.

pytest tests/test_kernels_compile.py -q       # skipped when nvcc is absent
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_clip_cu_compiles_for_sm90(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            "nvcc",
            "-arch=sm_90",
            "-O3",
            "-c",
            str(KERNELS / "clip.cu"),
            "-o",
            str(tmp_path / "clip.o"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "clip.o").stat().st_size > 0


def test_kernel_sources_have_no_torch_headers() -> None:
    # CI's fast compile check relies on clip.cu / clip.h staying torch-free.
    for name in ("clip.cu", "clip.h"):
        text = (KERNELS / name).read_text()
        assert "#include <torch" not in text and "#include <ATen" not in text, name


def test_kernel_dir_found() -> None:
    from andrea_diag.clip import cuda

    assert (cuda.kernel_dir() / "clip.cu").is_file()
    assert (cuda.kernel_dir() / "binding.cpp").is_file()
