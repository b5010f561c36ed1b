"""Parity review (s28b): bench/replication.py's "a gap of that size would need N seeds".

A one-sided protocol's miss named the seeds of a two-sided paired t at 0.05 ("two-sided paired
t"), floored at the two-sided test's 6 pairs, where its own test is one-sided and runs on no
fewer than 12 pairs (``MIN_REPLICATION_PAIRS``). It now names its own test's count. The
committed replication.json files are unchanged: the one miss among them (120m) is two-sided.

    pytest tests/test_parity_s28b_replication.py -q -p no:cacheprovider
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from andrea_diag.stats import paired_test, seeds_needed

_SPEC = importlib.util.spec_from_file_location(
    "replication", Path(__file__).parents[1] / "bench" / "replication.py"
)
replication = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(replication)


def _need(call: str) -> tuple[int, str]:
    m = re.search(r"would need (\d+) seeds \(80% power, (\S+) paired t\)", call)
    assert m, call
    return int(m.group(1)), m.group(2)


def test_a_one_sided_miss_names_the_one_sided_tests_seed_count() -> None:
    gaps = [0.05, -0.04, 0.03, -0.02, 0.04, -0.05, 0.01, 0.02, -0.03, 0.02, 0.0, 0.03]
    test = paired_test(gaps)
    assert test.mean > 0  # on the claimed side: the miss names a seed count
    call = replication._call(test, 0.3, len(gaps), "greater", [])
    need, side = _need(call)
    assert side == "one-sided"
    assert need == seeds_needed(test.sd, test.mean, alternative="greater")
    assert need < seeds_needed(test.sd, test.mean)  # the two-sided count it named before


def test_a_miss_never_names_fewer_seeds_than_the_protocol_tests_on() -> None:
    """A large gap with a small spread: a one-sided exact test could reject from 5 pairs, but
    the protocol runs none below 12 (it said "would need 6")."""
    test = paired_test([0.1 + 0.01 * i for i in range(12)])
    need, _ = _need(replication._call(test, 0.2, 12, "greater", []))
    assert need == replication.MIN_REPLICATION_PAIRS == 12
    need, side = _need(replication._call(test, 0.2, 12, "two-sided", []))
    assert (need, side) == (12, "two-sided")
