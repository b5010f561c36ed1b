"""An integer past Python's 4,300-digit ``str`` limit gets the field's own one line.

Building the message (``f"got {value}"``) raised a bare ``ValueError`` from ``int.__str__``,
so the refusal of ``seeds=[10**5000]`` read "Exceeds the limit (4300 digits) for integer string
conversion" instead of naming the field and its bounds.
"""

from __future__ import annotations

import pytest

from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments.executor_config import ExecutorConfig
from andrea_diag.experiments.sweep import SweepSpec
from andrea_diag.fields import shown_number

HUGE = 10**5000


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: SweepSpec(seeds=[HUGE]), "seeds must be at most"),
        (lambda: SweepSpec(lrs=[HUGE]), "lrs must be from 1e-30 to 1e+30"),
        (lambda: SweepSpec(lrs=[-HUGE]), "lrs must be"),
        (lambda: RunConfig(steps=HUGE).resolve(), "--steps must be at most"),
        (lambda: ExecutorConfig(jobs=HUGE), "jobs must be from 1 to"),
    ],
)
def test_a_5000_digit_integer_is_refused_naming_the_field_and_its_length(make, words) -> None:
    with pytest.raises(UserError) as caught:
        make()
    assert words in str(caught.value)
    assert "5001 digits" in str(caught.value)


@pytest.mark.parametrize("n", [1, 99, 100, 101, 4300, 5000])
def test_shown_number_counts_the_digits_of_a_power_of_ten_and_of_the_one_below(n) -> None:
    for value, digits in ((10**n, n + 1), (10**n - 1, n)):
        expected = str(value) if digits < 100 else f"an integer of {digits} digits"
        assert shown_number(value) == expected
