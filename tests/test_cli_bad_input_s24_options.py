"""Options refused in one line before anything is written (review of the CLI's bad input,
round 24): a ``--device cuda:N`` naming no GPU, an adaptive clip mode's parameter with no arm
of that mode, ``report --title`` for a page that keeps its own title."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_refusals import empty_fixture, refused, runner  # noqa: F401 (empty)

from andrea_diag.cli import app
from andrea_diag.errors import UserError

# ---- 1. --device cuda:N ----

BAD_ORDINALS = ["cuda:abc", "cuda:", "cuda:-1", "cuda:٤", "cuda:0 ", "cuda:1e400", "cuda:7"]


@pytest.fixture(name="one_gpu")
def one_gpu_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as one with one GPU (its name is only parsed, nothing is allocated)."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)


@pytest.mark.parametrize("name", BAD_ORDINALS)
def test_a_cuda_device_naming_no_gpu_is_one_line(name: str, one_gpu: None) -> None:
    """torch.device raised RuntimeError ("Invalid device string") for all but cuda:7, which
    failed at the first allocation ("invalid device ordinal"), after the output folder."""
    from andrea_diag.device import resolve_device

    with pytest.raises(UserError, match="--device"):
        resolve_device(name)


def test_a_cuda_device_of_a_gpu_that_is_there_is_that_device(one_gpu: None) -> None:
    import torch

    from andrea_diag.device import resolve_device

    assert resolve_device("cuda:0") == torch.device("cuda:0")


@pytest.mark.parametrize("command", ["bench-kernels", "accum-check", "bench-train"])
@pytest.mark.parametrize("name", ["cuda:abc", "cuda:7"])
def test_a_bench_on_a_cuda_device_naming_no_gpu_is_refused_before_its_folder(
    command: str, name: str, one_gpu: None, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused([command, "--device", name], monkeypatch, empty)
    assert "--device" in line and name in line


# ---- 2. an adaptive mode's parameter with no arm of that mode ----


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--clip", "global", "--zclip-z", "3"], "--zclip-z"),
        (["cascade", "--clip", "none,zclip", "--agc-lambda", "0.02"], "--agc-lambda"),
        (["cascade", "--spam-theta", "3"], "--spam-theta"),  # the default arms: none,global
        (["sweep", "--clip", "none,agc", "--skip-window", "8"], "--skip-window"),
        (["ladder", "--zclip-warmup", "5"], "--zclip-warmup"),
    ],
)
def test_an_adaptive_modes_parameter_with_no_arm_of_that_mode_is_refused(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """It was accepted and ignored: the run trained with no arm reading it."""
    line = refused(args, monkeypatch, empty)
    assert line.startswith(f"error: {flag} is used by --clip ")


# ---- 3. report --title for a page that keeps its own ----


@pytest.mark.parametrize("marker", ["cascade.json", "sweep.json"])
def test_report_title_for_a_cascade_or_sweeps_own_page_is_refused(
    marker: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """The page was rendered under its own title, the --title dropped without a word."""
    run = empty.parent / "run"
    run.mkdir()
    (run / marker).write_text("{}")
    line = refused(["report", "--title", "mine", str(run)], monkeypatch, empty)
    assert "--title" in line and marker.split(".")[0] in line


def test_report_title_for_a_runs_own_page_is_its_title(
    make_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(tmp_path / "none", clip="none", n_updates=20)
    res = runner.invoke(app, ["report", "--title", "my <run>", str(run)])
    assert res.exit_code == 0, res.output
    assert "<title>my &lt;run&gt;</title>" in (run / "report.html").read_text()
