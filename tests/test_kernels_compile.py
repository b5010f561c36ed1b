"""The kernel sources compile for sm_90 with plain nvcc (no torch headers): a seconds-long CI check.

pytest tests/test_kernels_compile.py -q       # the nvcc tests are skipped when nvcc is absent

Production (csrc/clip.cu) and the experiments (csrc/dev/*.cu) are both checked, so moving
a shared helper cannot break the side that the benchmarks alone build.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[1] / "csrc"
CUDA_SOURCES = ("clip.cu", "dev/clip_single.cu", "dev/adamw.cu")
# Headers and kernels that must stay torch-free (tables.h and the bindings are the torch side).
TORCH_FREE = (*CUDA_SOURCES, "clip.h", "tensor_table.h", "multi_tensor.cuh", "clip_device.cuh")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize(
    "source",
    # ~15-25 s each on 2 cores: production in the fast tier, the experiments in the slow one
    [
        pytest.param(s, marks=[pytest.mark.slow] if s.startswith("dev/") else [])
        for s in CUDA_SOURCES
    ],
)
def test_cuda_source_compiles_for_sm90(tmp_path: Path, source: str) -> None:
    obj = tmp_path / "out.o"
    # torch's own extension flags (no implicit half/bf16 conversions, among others): the JIT
    # build on the GPU uses them, and a kernel that compiles without them can fail there
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    cmd = [
        "nvcc",
        "-arch=sm_90",
        "-O3",
        *COMMON_NVCC_FLAGS,
        "-I",
        str(KERNELS),
        "-I",
        str(KERNELS / "dev"),
    ]
    proc = subprocess.run(
        [*cmd, "-c", str(KERNELS / source), "-o", str(obj)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert obj.stat().st_size > 0


def test_kernel_sources_have_no_torch_headers() -> None:
    # CI's fast compile check relies on the kernels and their headers staying torch-free.
    for name in TORCH_FREE:
        text = (KERNELS / name).read_text()
        assert "#include <torch" not in text and "#include <ATen" not in text, name


def test_production_kernels_do_not_include_the_experiments() -> None:
    for name in ("clip.cu", "clip.h", "binding.cpp", "clip_device.cuh", "multi_tensor.cuh"):
        assert '#include "dev' not in (KERNELS / name).read_text(), name


def test_kernel_dir_found() -> None:
    from andrea_diag.clip import cuda

    for source in (*cuda.SOURCES, *cuda.DEV_SOURCES):
        assert (cuda.kernel_dir() / source).is_file(), source
