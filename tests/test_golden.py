"""Behaviour pin: a tiny cascade's metrics, every clip mode included, are bit-identical to the
ones recorded in ``tests/golden/``.

A failure here means a change altered training numbers. If that was the intent, re-record with
``python tests/golden/record_golden.py`` and say in the commit which columns moved and why.

Every column is pinned bit for bit: training numbers (loss, grad norms, clip coefficients, eval
losses) and the diagnostics derived from them alike. That holds on every Intel x86-64 CPU with
AVX2 because the cascade runs in a child process under ``record_golden.PINNED_ENV`` (one thread,
ATen's AVX2 kernels, MKL's ``AVX2`` reproducibility branch): without the pin the thread count,
the CPU's vector ISA and MKL's vector math change float results at 1e-9..4e-4 relative (issue
23; stop 32's CI machine, ``record_golden``'s docstring). Where MKL refuses that branch (a
non-Intel CPU) the test skips and says so. The parent's own thread count and
``ATEN_CPU_CAPABILITY`` do not matter. Only wall-clock columns are left out.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_golden", GOLDEN_DIR / "record_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _same(a: object, b: object) -> bool:
    """Exact equality, with NaN equal to NaN (a skipped update's loss is NaN in both)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


@pytest.mark.slow
def test_tiny_cascade_metrics_are_bit_identical_to_the_golden_recording(tmp_path: Path) -> None:
    import json

    rec = _recorder()
    want = json.loads(rec.GOLDEN.read_text())
    ran = rec.run_pinned(tmp_path)
    why = rec.pin_holds(ran)
    if why is not None:
        pytest.skip(f"{why} ({_cpu()}): the recording holds on Intel CPUs with AVX2")
    got = ran["metrics"]
    assert sorted(got) == sorted(want)
    moved = []  # every column that moved, so one failing run says all of what changed
    for arm in want:
        assert sorted(got[arm]) == sorted(want[arm]), f"{arm}: columns changed"
        for col, values in want[arm].items():
            diff = [
                (i + 1, w, g)
                for i, (w, g) in enumerate(zip(values, got[arm][col], strict=True))
                if not _same(w, g)
            ]
            if diff:
                moved.append(f"{arm}.{col}: {len(diff)} updates, first {diff[0]}")
    head = f"{len(moved)} columns differ on {_cpu()} (update, golden, now):"
    assert not moved, "\n".join([head, *moved])


def _cpu() -> str:
    """This machine's CPU model and vector extensions, for a failure that is the machine's."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "an unknown CPU"
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                  if ln.startswith("model name")), "an unknown CPU")  # fmt: skip
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                  if ln.startswith("flags")), [])  # fmt: skip
    vec = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model} ({' '.join(vec)})"


def test_the_pin_holds_only_under_avx2_kernels_and_mkls_avx2_branch() -> None:
    """Where torch ran other kernels, or MKL refused its AVX2 branch (a non-Intel CPU: AUTO, 2),
    the numbers cannot be the recording's: the golden test skips with this reason."""
    rec = _recorder()
    assert rec.pin_holds({"capability": "AVX2", "mkl_branch": rec.PINNED_MKL_BRANCH}) is None
    assert "AVX512 kernels" in rec.pin_holds({"capability": "AVX512", "mkl_branch": 10})
    assert "refused" in rec.pin_holds({"capability": "AVX2", "mkl_branch": 2})
    assert "refused" in rec.pin_holds({"capability": "AVX2", "mkl_branch": None})


def test_this_process_reports_the_mkl_branch_it_runs() -> None:
    """``mkl_branch`` reads MKL's own answer (torch's MKL exports it): an int, or None."""
    import torch

    branch = _recorder().mkl_branch()
    if torch.backends.mkl.is_available():
        assert isinstance(branch, int) and branch > 0
