"""The fields the report's lock-in verdict is judged again from (round 23): ``config.json``'s
``model_config.vocab_size`` and ``summary.json``'s ``lockin.unigram_entropy``. A value of the
wrong type or range there is the run's word, not a reason to refuse its page: the page renders
with the verdict the run recorded, and a warning names the field, as for every other field
(runread.py). Before, each was a whole-page refusal, "cannot render ...: unexpected shape".
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    cli,
    edit,
    run_fixture,
)

VOCABS = [[8449], {"n": 8449}, math.nan, math.inf, -1]
ENTROPIES = [[2.5], {"h": 2.5}, "2.5", 10**400]  # a JSON integer past the float range


def _no_error(code: int, out: str) -> None:
    assert code == 0, out
    assert "Traceback" not in out and "error:" not in out, out


@pytest.mark.parametrize("value", VOCABS, ids=repr)
def test_a_bad_vocab_size_in_config_still_renders_the_report(run: Path, value: object) -> None:
    edit(run / "config.json", model_config__vocab_size=value)
    _no_error(*cli("report", str(run)))


@pytest.mark.parametrize("value", ENTROPIES, ids=lambda v: repr(v)[:12])
def test_a_bad_unigram_entropy_in_summary_still_renders_the_report(
    run: Path, value: object
) -> None:
    edit(run / "summary.json", lockin__unigram_entropy=value)
    code, out = cli("report", str(run))
    _no_error(code, out)
    assert "unigram_entropy" in out  # the warning names the field


def test_a_bad_vocab_size_in_a_cascade_arm_still_renders_the_cascade_page(cascade: Path) -> None:
    edit(cascade / "none" / "config.json", model_config__vocab_size=[1])
    edit(cascade / "global" / "summary.json", lockin__unigram_entropy="x")
    _no_error(*cli("report", str(cascade)))
    assert (cascade / "report.html").stat().st_size > 0
