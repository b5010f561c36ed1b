"""Behaviour pin: a tiny cascade's metrics are bit-identical to the ones recorded in
``tests/golden/`` before the trainer was split into components (issue 7).

A failure here means a change altered training numbers. If that was the intent, re-record with
``python tests/golden/record_golden.py`` and say why in the commit.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

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


def test_tiny_cascade_metrics_are_bit_identical_to_the_golden_recording(tmp_path: Path) -> None:
    rec = _recorder()
    want = json.loads(rec.GOLDEN.read_text())
    got = json.loads(json.dumps(rec.run_golden_cascade(tmp_path / "c"), allow_nan=True))
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
