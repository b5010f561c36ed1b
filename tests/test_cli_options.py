"""The CLI's options come from the config: every field shows in --help, every flag that a message
or the README names exists, and a bad number or a repeated sweep value is one line, not a
traceback (issues 18 and 23)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.commands.options import BY_NAME, OPTIONS

ROOT = Path(__file__).resolve().parents[1]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
RUN_COMMANDS = {"cascade": True, "train": True, "sweep": False, "ladder": False}  # one cell?
# flags of other programs that the README shows beside ours
OTHER_TOOLS = {"--no-cache-dir", "--logdir"}
runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """No wrapping: a flag or a default is one run of text in the help."""
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 400)


def _help(command: str) -> str:
    res = runner.invoke(app, [command, "--help"])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def _commands() -> dict[str, Any]:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _all_flags() -> set[str]:
    flags = {"--help", "--version"}
    for cmd in _commands().values():
        for p in cmd.params:
            flags |= {o for o in [*p.opts, *p.secondary_opts] if o.startswith("--")}
    return flags


@pytest.mark.parametrize("command", list(RUN_COMMANDS))
def test_every_cli_field_is_in_help(command: str) -> None:
    text = _help(command)
    for opt in OPTIONS:
        if opt.cli.one_cell and not RUN_COMMANDS[command]:
            continue  # sweep and ladder declare --size, --lr, ... as comma lists themselves
        assert opt.flag in text, f"{command} --help lacks {opt.flag}"
        words = " ".join(opt.cli.help.split())
        assert words in text, f"{command} --help lost part of {opt.flag}'s help: {words!r}"
        if opt.default is None and opt.cli.shown and (command, opt.name) != ("ladder", "steps"):
            assert opt.cli.shown in text, f"{opt.flag}'s default is not said: {opt.cli.shown}"


def test_help_keeps_bracketed_text_and_shows_no_bool_type_on_flags() -> None:
    cascade, report = _help("cascade"), _help("report")
    assert "{source name: [documents]}" in cascade  # not eaten as rich markup
    assert "each run's own report.html, inside it" in report
    for command in _commands():
        assert "<bool>" not in _help(command), command


def test_ladder_help_shows_its_own_steps_default() -> None:
    from andrea_diag.experiments.ladder import LADDER_STEPS

    text = _help("ladder")
    assert f"Optimizer updates per arm. [default: {LADDER_STEPS}]" in text
    assert "per size" not in text.split("--steps", 1)[1].split("--", 1)[0]


def _error_texts() -> list[str]:
    """Every string constant inside a raise of UserError (and its BadArgument, BadType),
    ValueError or UnknownClipMode in the package."""
    texts = []
    for path in (ROOT / "andrea_diag").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
            if name.endswith(("Error", "BadArgument", "BadType", "UnknownClipMode")):
                texts += [n.value for n in ast.walk(node.exc) if isinstance(n, ast.Constant)
                          and isinstance(n.value, str)]  # fmt: skip
    return texts


def test_every_flag_named_in_errors_and_readme_exists() -> None:
    flags = _all_flags()
    in_errors = {f for t in _error_texts() for f in FLAG.findall(t)}
    assert {"--lr", "--inject", "--spam-warmup"} <= in_errors  # the scan sees the messages
    in_readme = set(FLAG.findall((ROOT / "README.md").read_text())) - OTHER_TOOLS
    assert not in_errors - flags, f"errors name flags no command has: {in_errors - flags}"
    assert not in_readme - flags, f"the README names flags no command has: {in_readme - flags}"


def test_every_integer_option_has_an_upper_bound() -> None:
    for name, cmd in _commands().items():
        for p in cmd.params:
            if p.type_descriptor.annotation is not int or getattr(p, "is_flag", False):
                continue
            opt = BY_NAME.get(p.name)
            bounded = opt.cli.hi if opt is not None else p.max
            assert bounded is not None, f"{name} {p.opts[0]} has no upper bound"


def test_eval_every_is_accepted_by_cascade(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_run(spec: Any, console: Any) -> Any:
        seen["cfg"] = spec.base
        return SimpleNamespace(summaries={}, hashes_identical=True, out_dir="x")

    monkeypatch.setattr("andrea_diag.commands.run.run_cascade", fake_run)
    monkeypatch.setattr("andrea_diag.commands.run.render_cascade_page", lambda *a: None)
    res = runner.invoke(app, ["cascade", "--eval-every", "5", "--spike-window", "9",
                              "--spike-z", "4.5", "--nproc", "1", "--no-shadow"])  # fmt: skip
    assert res.exit_code == 0, res.output
    cfg = seen["cfg"]
    assert cfg.eval_every == 5 and cfg.probes.spike_window == 9 and cfg.probes.spike_z == 4.5
    assert cfg.probes.shadow is False and cfg.replicas == 1


def _refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_training(*a: Any, **k: Any) -> None:
        raise AssertionError("training started")

    for target in ("andrea_diag.commands.run.run_cascade", "andrea_diag.experiments.sweep.run_sweep",
                   "andrea_diag.experiments.ladder.run_ladder"):  # fmt: skip
        monkeypatch.setattr(target, no_training)


def _one_line(args: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    _refuse(monkeypatch)
    res = runner.invoke(app, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output and not isinstance(res.exception, AssertionError)
    assert lines and lines[0].startswith("error:"), res.output
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint:")), res.output
    return lines[0]


BIG = str(2**64 + 1)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["cascade", "--seed", "18446744073709551617"], "--seed"),
        (["cascade", "--skip-window", "9223372036854775807"], "--skip-window"),
        (["cascade", "-m", "4611686018427387904"], "--micro-batch"),
        (["train", "--steps", BIG], "--steps"),
        (["cascade", "--nproc", BIG], "--nproc"),
        (["cascade", "--eval-every", BIG], "--eval-every"),
        (["cascade", "--spike-window", BIG], "--spike-window"),
        (["cascade", "--zclip-warmup", BIG], "--zclip-warmup"),
        (["sweep", "--seed", f"0,{BIG}"], "--seed"),
        (["ladder", "--size", "tiny,tiny2", "--accum", BIG], "--accum"),
        (["bench-kernels", "--reps", BIG], "--reps"),
        (["bench-train", "--updates", BIG], "--updates"),
        (["accum-check", "--micro-batch", BIG], "--micro-batch"),
        (["sweep", "--jobs", BIG], "--jobs"),
    ],
)
def test_an_integer_past_its_bound_is_one_line(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert flag in _one_line(args, monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        ["cascade", "--seed", "abc"],
        ["cascade", "--lr", "fast"],
        ["cascade", "--seed", "-1"],
        ["sweep", "--lr", "1e-3,nan"],
    ],
)
def test_a_value_that_is_not_a_number_or_out_of_range_is_one_line(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_line(args, monkeypatch)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["sweep", "--seed", "0,0"], "--seed"),
        (["sweep", "--lr", "1e-3,0.001"], "--lr"),  # the same number, written twice
        (["sweep", "--size", "tiny,tiny"], "--size"),
        (["sweep", "--max-norm", "1,1.0"], "--max-norm"),
        (["sweep", "--precision", "fp32,fp32"], "--precision"),
        (["ladder", "--size", "tiny,tiny2", "--seed", "0,1,1"], "--seed"),
    ],
)
def test_a_repeated_sweep_cell_is_refused_before_any_training(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = _one_line(args, monkeypatch)
    assert flag in line and "twice" in line
