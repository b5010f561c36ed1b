"""Behaviour pin: a tiny cascade's metrics, every clip mode included, are bit-identical to the
ones recorded in ``tests/golden/``.

A failure here means a change altered training numbers. If that was the intent, re-record with
``python tests/golden/record_golden.py`` and say in the commit which columns moved and why.

Every column is pinned bit for bit: training numbers (loss, grad norms, clip coefficients, eval
losses) and the diagnostics derived from them alike. That holds on any x86-64 CPU with AVX2
because the cascade runs in a child process under ``record_golden.PINNED_ENV`` (one thread,
ATen's AVX2 kernels, MKL's ``COMPATIBLE`` reproducibility branch): without the pin the thread
count and the CPU's vector ISA change float results at 1e-7..4e-4 relative (issue 23). The
parent's own thread count and ``ATEN_CPU_CAPABILITY`` do not matter. Only wall-clock columns
are left out.
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
    if ran["capability"] != rec.PINNED_CAPABILITY:
        pytest.skip(f"this CPU cannot run torch's {rec.PINNED_CAPABILITY} kernels")
    got = ran["metrics"]
    assert sorted(got) == sorted(want)
    for arm in want:
        assert sorted(got[arm]) == sorted(want[arm]), f"{arm}: columns changed"
        for col, values in want[arm].items():
            diff = [
                (i + 1, w, g)
                for i, (w, g) in enumerate(zip(values, got[arm][col], strict=True))
                if not _same(w, g)
            ]
            assert not diff, f"{arm}.{col} differs at (update, golden, now): {diff[:3]}"
