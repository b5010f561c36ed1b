"""Command-line input refused in one line, or helped as it should be (round 28, from a bad-input
audit):

- A run made before round 27's positive-option range, with a saved ``--lr 1e-31`` (or
  ``--max-norm``, ``--agc-eps``, ``--spike-z`` outside 1e-30..1e30), was refused at ``--resume``
  as "a run file is corrupt ... the file is damaged or edited". It is a run of an earlier
  version: the line now says so, names the option and its value, and says what to do.
- A comma-list option given twice ran the last one without a word: ``cascade --clip global
  --clip none`` trained the one arm ``none`` (``--inject`` and ``--source`` beside it are
  repeatable), ``sweep --lr 1e-3 --lr 1e-2`` a grid of one lr. One warning line says which
  value counts now. The last one still counts, as for every option: a base command line with
  an override after it is a use (tests/test_hostile_sweep.py's ``[*SWEEP, "--lr", ...]``).
- ``report --out`` and ``export --out`` took a control character (an ESC, a pasted newline)
  into the name of what they write, where a run's ``--out`` has refused one since round 21 (a
  Unicode separator there is still written and shown escaped, as round 25 pinned).
- ``export --help`` said the runs go "into ." (rich took "[default: andrea-diag]" in the text
  for markup and dropped it); ``bench-train --out`` and ``report --title`` said no default.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer.main
from cli_refusals import empty_fixture, no_work_started, refused, runner  # noqa: F401 (empty)
from rich.markup import render

from andrea_diag.cli import app
from andrea_diag.config import RunConfig


def _saved_run(root: Path, field: str, value: float) -> tuple[Path, Path]:
    """A started one-arm cascade (config.json and cascade.json: what a resume reads first)
    whose config holds ``value`` at ``field`` (dotted for a nested one: ``probes.spike_z``)."""
    out = root / "c"
    (out / "none").mkdir(parents=True)
    config = RunConfig(clip="none", steps=6).resolve().to_dict()
    outer, _, inner = field.rpartition(".")
    (config[outer] if outer else config)[inner] = value
    path = out / "none" / "config.json"
    path.write_text(json.dumps(config))
    meta = {"arms": ["none"], "status": "running", "size": "tiny", "seed": 0}
    (out / "cascade.json").write_text(json.dumps(meta))
    return out, path


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("lr", 1e-31, "--lr"), ("max_norm", 1e-35, "--max-norm"),
     ("clip_params.agc_eps", 1e31, "--agc-eps"), ("probes.spike_z", 1e32, "--spike-z")],
    ids=["lr", "max-norm", "agc-eps", "spike-z"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["cascade", "train"])
def test_resuming_a_run_saved_before_the_positive_range_names_the_option_and_the_way_on(
    tmp_path: Path, field: str, value: float, flag: str, command: str
) -> None:
    out, _ = _saved_run(tmp_path, field, value)
    before = _files(out)
    res = runner.invoke(app, [command, "--resume", str(out)])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert len(lines) == 2 and lines[0].startswith("error:"), res.output
    said = " ".join(lines)
    assert "corrupt" not in said and "damaged" not in said, said
    assert f"its {flag} {value!r} is outside that range" in lines[0], said
    assert "from 1e-30 to 1e+30" in lines[0] and f"start it again with {flag}" in lines[1], said
    assert _files(out) == before


def test_only_the_range_is_said_as_an_earlier_versions_value(tmp_path: Path) -> None:
    """A negative lr never ran in any version: its file is damaged, as before."""
    older, _ = _saved_run(tmp_path / "older", "lr", 1e-31)
    res = runner.invoke(app, ["cascade", "--resume", str(older)])
    assert res.exit_code == 2 and "was made before a positive option" in res.output, res.output
    damaged, path = _saved_run(tmp_path / "damaged", "lr", -1.0)
    res = runner.invoke(app, ["cascade", "--resume", str(damaged)])
    assert res.exit_code == 2 and f"{path} holds a value no run takes" in res.output, res.output
    assert "was made before" not in res.output, res.output


def _started(args: list[str], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> str:
    """The output of ``args`` run in ``cwd`` up to its work, which must have started."""
    no_work_started(monkeypatch)
    monkeypatch.chdir(cwd)
    res = runner.invoke(app, args)
    assert isinstance(res.exception, AssertionError), res.output  # the work started
    return res.output


@pytest.mark.parametrize(
    ("args", "said"),
    [(["cascade", "--steps", "2", "--clip", "global", "--clip", "none"], "--clip is given 2 "
      "times: only the last, none, counts"),
     (["sweep", "--steps", "2", "--lr", "1e-3", "--lr", "1e-2"], "--lr is given 2 times: only "
      "the last, 1e-2, counts"),
     (["ladder", "--steps", "2", "--seed", "0", "--seed", "1", "--seed", "2"], "--seed is given "
      "3 times: only the last, 2, counts"),
     (["bench-kernels", "--device", "cpu", "--sizes", "tiny", "--sizes", "tiny2"], "--sizes is "
      "given 2 times: only the last, tiny2, counts")],
    ids=["cascade-clip", "sweep-lr", "ladder-seed", "bench-kernels-sizes"],
)  # fmt: skip
def test_a_comma_list_option_given_again_is_said_in_one_warning_not_silently(
    args: list[str], said: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    output = _started(args, monkeypatch, empty)
    warnings = [x for x in output.splitlines() if x.startswith("warning:")]
    assert warnings == [f"warning: {said} (for several values, give one comma list)"], output


def test_an_option_given_again_to_override_it_is_not_warned_of(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """``--inject`` is repeatable, ``--steps`` and ``--shadow`` overridden (the last counts);
    only the comma list ``--clip`` is warned of."""
    args = ["cascade", "--steps", "6", "--inject", "outlier@5", "--inject", "nonfinite@9",
            "--steps", "20", "--shadow", "--no-shadow", "--clip", "global", "--clip", "none"]  # fmt: skip
    warnings = [x for x in _started(args, monkeypatch, empty).splitlines() if "warning" in x]
    assert len(warnings) == 1 and warnings[0].startswith("warning: --clip is given"), warnings


def test_every_comma_list_option_is_one_the_cli_warns_of_given_twice() -> None:
    """Each option whose help says it takes a comma list is in ``cli.LISTS``, and each name
    there is an option of its command (a list gone stale warns of nothing)."""
    from andrea_diag.cli import LISTS

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        params = {p.name for p in cmd.params}
        said = {p.name for p in cmd.params if "comma" in (getattr(p, "help", "") or "").lower()}
        assert said <= set(LISTS.get(name, ())) <= params, (name, said, LISTS.get(name))


@pytest.fixture(name="run")
def run_fixture(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    return make_run(tmp_path / "run", n_updates=20)


@pytest.mark.parametrize(
    ("command", "out"),
    [(["report"], "a\x1bb.html"), (["report"], "pasted\n.html"),
     (["export", "--tensorboard"], "tb\x1b[2Jx")],
    ids=["report-esc", "report-newline", "export-esc"],
)  # fmt: skip
def test_a_report_or_export_out_with_a_control_character_is_refused_before_writing(
    command: list[str], out: str, run: Path, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    before = _files(run)
    line = refused([*command, str(run), "--out", out], monkeypatch, empty)
    assert "--out" in line and "holds control characters" in line, line
    assert _files(run) == before


def _help(command: str) -> str:
    res = runner.invoke(app, [command, "--help"], terminal_width=300, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    return " ".join(" ".join(x.strip("│ ").split()) for x in res.output.splitlines())


@pytest.mark.parametrize(
    ("command", "said"),
    [("export", "W&B project / MLflow experiment the runs go into. [default: (andrea-diag)]"),
     ("bench-train", "Folder for bench-train.json / .html. [default: "
                     "(runs/bench-train-<size>-<time>)]"),
     ("report", "Report title. [default: (andrea-diag report: <the arms' names>)]")],
    ids=["export-project", "bench-train-out", "report-title"],
)  # fmt: skip
def test_an_options_help_says_its_default(command: str, said: str) -> None:
    assert said in _help(command)


def test_no_options_help_text_loses_brackets_to_rich_markup() -> None:
    """Every help text as rich renders it is the text as written (an escaped bracket is a
    bracket): "[default: andrea-diag]" in export's text was a tag to rich, and vanished."""
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        for param in cmd.params:
            text = getattr(param, "help", None) or ""
            assert render(text).plain == text.replace("\\[", "["), (name, param.name, text)
