"""Bad input to bench-kernels, bench-train and accum-check, round 31's audit:

- ``bench-kernels --cases clip+adamw --dtypes bf16`` timed the fp32 step and ignored the
  dtype without a word (the step is fp32 only): refused, and the run records ``--dtypes fp32``.
- A refusal of ``--out`` (a file, a run folder) came after the "no GPU" line: two lines.
- A bench or check stopped before it wrote (Ctrl-C, out of memory) left its empty ``--out``
  folder behind (``runs/bench-kernels-tiny-<time>``): it is removed; one given and already
  there stays.
- accum-check's full batch can outgrow the memory below its token cap: the allocator's
  traceback (CPU: a RuntimeError; CUDA: torch.OutOfMemoryError). Now one line and a hint.
- ``bench-train --clip spam``: the plain loop's clipper was made without the optimizer, so
  its first call raised ValueError (SPAM reads Adam's v): a traceback.
- ``bench-train --updates 1000000000`` (the option's bound) drew every batch before the
  timing until the process died: refused in one line where they cannot fit in memory.
- The recorded command of bench-kernels and bench-train did not quote ``--out``: a folder
  with a space in its name did not repeat.
- ``run_bench`` (the library call) took an unknown size or dtype to a ``KeyError``, and
  ``reps=0`` to a ``StatisticsError``, after timing had begun: a ``BadArgument`` first.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_refusals import empty_fixture, refused, runner  # noqa: F401 (empty)

from andrea_diag.bench import BenchResult
from andrea_diag.cli import app

KERNELS = ["bench-kernels", "--device", "cpu", "--sizes", "tiny", "--reps", "1"]
TRAIN = ["bench-train", "--device", "cpu", "--updates", "1", "--warmup", "0", "--block", "1"]
ACCUM = ["accum-check", "--device", "cpu"]
WORK = {
    "bench-kernels": (KERNELS, "andrea_diag.bench.run_bench"),
    "bench-train": (TRAIN, "andrea_diag.bench.train.bench_train"),
    "accum-check": (ACCUM, "andrea_diag.experiments.accum_check.run_accum_check"),
}


def test_dtypes_for_clip_adamw_alone_are_refused_not_ignored(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused([*KERNELS, "--cases", "clip+adamw", "--dtypes", "fp32,bf16"], monkeypatch,
                   empty)  # fmt: skip
    assert line == (
        "error: --dtypes bf16 would not be timed: --cases clip+adamw times an fp32 step alone"
    )


@pytest.mark.parametrize("dtypes", [[], ["--dtypes", "fp32"]], ids=["default", "fp32"])
def test_clip_adamw_alone_times_and_records_fp32(
    monkeypatch: pytest.MonkeyPatch, empty: Path, dtypes: list[str]
) -> None:
    """The default ("fp32,bf16" before) is fp32 for the adamw case alone: the command that the
    run records repeats without the refusal above."""
    calls: list[list[str]] = []

    def run_bench(sizes: list[str], dtypes: list[str], *a: Any, **k: Any) -> None:
        calls.append(dtypes)
        raise KeyboardInterrupt

    monkeypatch.setattr("andrea_diag.bench.run_bench", run_bench)
    monkeypatch.chdir(empty)
    res = runner.invoke(app, [*KERNELS, "--cases", "clip+adamw", *dtypes])
    assert res.exit_code == 130 and calls == [["fp32"]], res.output


def test_an_out_refused_is_the_one_line_not_after_the_no_gpu_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    res = runner.invoke(app, [*KERNELS, "--out", str(tmp_path / "file")])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and lines[0].startswith("error: --out "), res.output
    assert len(lines) == 2 and lines[1].startswith("hint:"), res.output


@pytest.mark.parametrize("command", sorted(WORK))
def test_a_stop_before_anything_was_written_leaves_no_empty_out_folder(
    monkeypatch: pytest.MonkeyPatch, empty: Path, command: str
) -> None:
    args, target = WORK[command]

    def stopped(*a: Any, **k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, stopped)
    monkeypatch.chdir(empty)
    res = runner.invoke(app, args)  # the default --out: runs/<command>-tiny-<time>
    assert res.exit_code == 130 and "interrupted" in res.output, res.output
    assert os.listdir(empty) == []
    (empty / "given").mkdir()  # an --out that was there before is the user's: it stays
    res = runner.invoke(app, [*args, "--out", "given"])
    assert res.exit_code == 130 and os.listdir(empty) == ["given"], res.output


@pytest.mark.parametrize(
    "error",
    [lambda: torch.empty(2**48, dtype=torch.uint8),  # the CPU allocator's own RuntimeError
     lambda: (_ for _ in ()).throw(torch.OutOfMemoryError("CUDA out of memory. Tried to "
                                                          "allocate 2.00 GiB"))],
    ids=["cpu", "cuda"],
)  # fmt: skip
def test_accum_check_out_of_memory_is_one_line(
    monkeypatch: pytest.MonkeyPatch, empty: Path, error: Any
) -> None:
    def full_batch_grad(*a: Any, **k: Any) -> None:
        error()

    monkeypatch.setattr("andrea_diag.experiments.accum_check.full_batch_grad", full_batch_grad)
    monkeypatch.chdir(empty)
    res = runner.invoke(app, ACCUM)
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert errors == [
        "error: out of memory on cpu: the check's full batch m*A*D*T = 4*4*1*32 = 512 tokens "
        "is one forward of tiny"
    ], res.output
    assert "hint: lower --micro-batch" in res.output and os.listdir(empty) == []


def test_a_runtime_error_that_is_not_memory_is_not_called_one() -> None:
    from andrea_diag.experiments.accum_check import out_of_memory

    assert not out_of_memory(RuntimeError("shape mismatch"))
    assert out_of_memory(MemoryError())


def test_bench_train_plain_loop_binds_the_optimizer_for_spam() -> None:
    """Before: ValueError "clip mode 'spam' reads Adam's v" at the plain loop's first update."""
    from andrea_diag.bench.train import PlainLoop
    from andrea_diag.config import RunConfig

    cfg = RunConfig(size="tiny", clip="spam", device="cpu").resolve()
    loop = PlainLoop(cfg, torch.device("cpu"))
    tokens = torch.randint(0, cfg.model.vocab_size, (cfg.accum, cfg.micro_batch, cfg.seq_len + 1))
    before = [p.detach().clone() for p in loop.params]
    loop.update(tokens)
    assert loop.n == 1 and any(
        not torch.equal(a, p) for a, p in zip(before, loop.params, strict=True)
    )


def test_bench_train_updates_whose_batches_cannot_fit_are_one_line(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """10**9 updates of tiny's batches are ~11 TB: the option's bound took them."""
    line = refused(["bench-train", "--device", "cpu", "--updates", "1000000000"], monkeypatch,
                   empty)  # fmt: skip
    assert line.startswith("error: --updates 1000000000 and --warmup 2: their batches are drawn")


def _kernels_result(*a: Any, **k: Any) -> BenchResult:
    return BenchResult({"reps": 1, "gpu": None, "sizes": [], "dtypes": [], "adamw_sizes": []})


def _train_result(*a: Any, **k: Any) -> dict[str, Any]:
    arm = {"ms_per_update": 1.0}
    return {"meta": {}, "engine": arm, "plain": arm, "engine_over_plain": 1.0, "probes": []}


@pytest.mark.parametrize(
    ("command", "work", "page", "result"),
    [("bench-kernels", "andrea_diag.bench.run_bench",
      "andrea_diag.report.bench_page.render_bench_page", _kernels_result),
     ("bench-train", "andrea_diag.bench.train.bench_train",
      "andrea_diag.report.bench_train_page.render_bench_train_page", _train_result)],
    ids=["bench-kernels", "bench-train"],
)  # fmt: skip
def test_the_recorded_command_quotes_an_out_with_a_space(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str, work: str, page: str,
    result: Any,
) -> None:  # fmt: skip
    monkeypatch.setattr(work, result)
    monkeypatch.setattr(page, lambda *a, **k: "<html></html>")
    out = tmp_path / "my results"
    res = runner.invoke(app, [*WORK[command][0], "--out", str(out)])
    assert res.exit_code == 0, res.output
    recorded = json.loads((out / f"{command}.json").read_text())["meta"]["command"]
    args = shlex.split(recorded)
    assert args[args.index("--out") + 1] == str(out)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [({"sizes": ["huge"]}, "unknown size 'huge'"), ({"dtypes": ["fp8"]}, "unknown dtype 'fp8'"),
     ({"reps": 0}, "reps must be a whole number of at least 1, got 0"),
     ({"adamw_sizes": ["12M"]}, "unknown size '12M'")],
    ids=["size", "dtype", "reps", "adamw-size"],
)  # fmt: skip
def test_run_bench_refuses_what_it_cannot_time_before_timing(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], says: str
) -> None:
    """Before: a KeyError (or StatisticsError for reps=0) after the copy bandwidth was timed."""
    from andrea_diag.bench import clip, run_bench
    from andrea_diag.errors import BadArgument

    def timed(*a: Any, **k: Any) -> None:
        raise AssertionError("timing started")

    monkeypatch.setattr(clip, "copy_bandwidth", timed)
    args = {"sizes": ["tiny"], "dtypes": ["fp32"], "reps": 1, "device": "cpu"} | kwargs
    with pytest.raises(BadArgument, match=says):
        run_bench(**args)
