"""click's own parse errors (an unknown option, an extra argument, an option without its
value) are one ``error:`` line with a hint to --help, as every other bad input is, not
click's boxed usage panel."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app


@pytest.mark.parametrize(
    ("args", "said"),
    [(["doctor", "--bogus"], "No such option: --bogus"),
     (["cascade", "extra"], "unexpected extra argument"),
     (["sweep", "--size"], "'--size' requires an argument"),
     (["doctor", "--build=3"], "does not take a value"),
     (["--bogus"], "No such option: --bogus")],
)  # fmt: skip
def test_a_usage_error_is_one_error_line_with_a_hint_to_help(args: list[str], said: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    errors = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and said in errors[0], res.output
    assert "--help" in res.output and "Usage:" not in res.output and "╭" not in res.output
