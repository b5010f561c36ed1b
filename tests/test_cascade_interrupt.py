"""Ctrl-C (or SIGTERM) in a cascade: cascade.json says "interrupted", one line gives the exact
resume command, and that command continues the run to the end."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.experiments import cascade as cascade_mod
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.experiments.status import STATUSES, resume_command
from andrea_diag.record import read_jsonl
from andrea_diag.signals import Terminated

STEPS, EVERY, STOP_AT = 8, 4, 6


def _stop_at(monkeypatch: pytest.MonkeyPatch, arm: str, update: int, exc: BaseException) -> None:
    """The trainer raises ``exc`` in ``arm`` once update ``update`` is recorded (as Ctrl-C would
    land between two updates)."""
    real = cascade_mod.train_arm

    def train_arm(cfg, run_dir, data, plan, *, progress=None, resume_from=None):
        def tick(u: int, row: dict) -> None:
            if progress is not None:
                progress(u, row)
            if cfg.arm == arm and u == update:
                raise exc

        return real(cfg, run_dir, data, plan, progress=tick, resume_from=resume_from)

    monkeypatch.setattr(cascade_mod, "train_arm", train_arm)


def _interrupted(tmp_path: Path, monkeypatch, exc: BaseException) -> tuple[Path, str]:
    out = tmp_path / "c"
    _stop_at(monkeypatch, "global", STOP_AT, exc)
    buf = io.StringIO()
    cfg = RunConfig(size="tiny", steps=STEPS, checkpoint_every=EVERY, device="cpu")
    with pytest.raises(type(exc)):
        run_cascade(CascadeSpec(base=cfg, clips=["none", "global"], out=out),
                    Console(file=buf, width=500))  # fmt: skip
    monkeypatch.undo()
    return out, buf.getvalue()


@pytest.mark.slow  # two tiny cascades, really trained
def test_ctrl_c_marks_the_cascade_interrupted_and_a_resume_finishes_it(tmp_path, monkeypatch):
    out, said = _interrupted(tmp_path, monkeypatch, KeyboardInterrupt())
    meta = json.loads((out / "cascade.json").read_text())
    assert meta["status"] == "interrupted" and "interrupted" in STATUSES
    lines = [ln for ln in said.splitlines() if "resume with" in ln]
    assert lines == [f"interrupted: resume with  andrea-diag cascade --resume {out}"]
    assert len(read_jsonl(out / "global" / "metrics.jsonl")) == STOP_AT

    res = CliRunner().invoke(app, ["cascade", "--resume", str(out)])  # the printed command
    assert res.exit_code == 0, res.output
    assert json.loads((out / "cascade.json").read_text())["status"] == "done"
    for arm in ("none", "global"):
        assert read_jsonl(out / arm / "metrics.jsonl")["update"].tolist() == list(
            range(1, STEPS + 1)
        )


@pytest.mark.slow
def test_sigterm_marks_the_cascade_interrupted_too(tmp_path, monkeypatch):
    out, said = _interrupted(tmp_path, monkeypatch, Terminated(15))
    assert json.loads((out / "cascade.json").read_text())["status"] == "interrupted"
    assert f"andrea-diag cascade --resume {out}" in said


CELL = "runs/s/tiny-lr0.001-mn1-s0"  # a sweep's cell: the cascade that was stopped


@pytest.mark.parametrize(
    ("command", "want"),
    [
        ("andrea-diag train --size tiny --out runs/a", f"andrea-diag train --resume {CELL}"),
        ("andrea-diag cascade --steps 5", f"andrea-diag cascade --resume {CELL}"),
        ("andrea-diag sweep --seed 0,1 --out runs/s", "andrea-diag sweep --seed 0,1 --out runs/s"),
        ("andrea-diag ladder --out=runs/s --seed 0", "andrea-diag ladder --out=runs/s --seed 0"),
        # without --out the same command would start a fresh folder: the hint names the sweep's
        ("andrea-diag sweep --seed 0,1", "andrea-diag sweep --seed 0,1 --out runs/s"),
        ("andrea-diag ladder --seed 0", "andrea-diag ladder --seed 0 --out runs/s"),
        ("andrea-diag -x tests/foo.py", f"andrea-diag cascade --resume {CELL}"),
    ],
)
def test_the_resume_command_follows_how_the_run_was_started(command, want):
    assert resume_command(Path(CELL), command) == want


def test_a_sweep_hint_quotes_a_folder_with_spaces():
    said = resume_command(Path("my runs/s 1/cell"), "andrea-diag sweep --seed 0")
    assert said == "andrea-diag sweep --seed 0 --out 'my runs/s 1'"


def test_statuses_are_one_str_enum_whose_json_is_the_on_disk_string() -> None:
    """Old runs' strings read back as the enum; a new run writes the same strings."""
    from andrea_diag.experiments.status import Status

    on_disk = {"running", "done", "interrupted", "crashed", "partial", "not run"}
    assert {s.value for s in Status} == on_disk
    assert all(Status(v) == v and json.dumps(Status(v)) == json.dumps(v) for v in on_disk)
    assert set(STATUSES) <= set(Status)
