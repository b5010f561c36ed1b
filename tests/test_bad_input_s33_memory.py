"""Sizes the options take but this host cannot hold, and a batch too small to judge, found by
session 33's audit: one line and a non-zero exit before any output, not an allocator's
traceback, a kernel kill or a false verdict.

- ``accum-check --replicas 256`` (the option takes up to 1024) ran the machine out of memory:
  the full batch's logits are counted first (``LOGIT_BYTES`` a token and vocabulary entry).
- ``accum-check --micro-batch 1 --seq-len 2`` said the toolkit's loop was broken: few-row fp32
  matmuls round a correct loop past 1e-6; microbatches under 8 tokens are refused.
- ``cascade --vocab-size 2147483647`` with token ids made a 549 GB embedding (a traceback, and
  a run folder holding only ``cascade.json``); the GPT's parameters are counted first.

    pytest tests/test_bad_input_s33_memory.py -q
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from andrea_diag import factories
from andrea_diag.cli import app
from andrea_diag.experiments import accum_check

runner = CliRunner()


def _lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip()]


def test_an_accum_check_whose_logits_exceed_the_free_memory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accum_check, "available_memory", lambda: 2**30)  # 1 GiB free
    out = tmp_path / "ac"
    res = runner.invoke(app, ["accum-check", "--replicas", "16", "--out", str(out)])
    lines = _lines(res.output)
    assert res.exit_code == 2, res.output
    assert lines[0] == ("error: the check's batch m*A*D*T is 8,192 tokens: its logits need about "
                        "2.3 GiB, more than the 1.0 GiB of memory free"), lines  # fmt: skip
    assert lines[1].startswith("hint: lower --micro-batch") and len(lines) == 2, lines
    assert not out.exists()


def test_an_accum_check_that_fits_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accum_check, "available_memory", lambda: 2**30)
    spec = accum_check.AccumSpec(replicas=2)  # 1,024 tokens: about 0.3 GiB
    assert spec.validate().name == "tiny"


@pytest.mark.parametrize(("m", "t"), [(1, 2), (1, 3), (2, 3), (1, 7)])
def test_a_microbatch_under_eight_tokens_is_refused_not_judged(
    tmp_path: Path, m: int, t: int
) -> None:
    out = tmp_path / "ac"
    res = runner.invoke(app, ["accum-check", "--micro-batch", str(m), "--accum", "2",
                              "--seq-len", str(t), "--out", str(out)])  # fmt: skip
    lines = _lines(res.output)
    assert res.exit_code == 2, res.output
    assert lines[0] == (f"error: --micro-batch x --seq-len is {m * t}: a microbatch of fewer "
                        "than 8 tokens is too small to judge in fp32"), lines  # fmt: skip
    assert not out.exists()


@pytest.mark.slow
def test_the_smallest_microbatch_taken_passes_with_a_correct_loop(tmp_path: Path) -> None:
    for m, t in ((1, 8), (2, 4)):
        result = accum_check.run_accum_check(
            accum_check.AccumSpec(micro_batch=m, accum=2, seq_len=t, seed=1)
        )
        assert result.ok, [(r.method, r.rel_err) for r in result.rows if r.kind == "toolkit"]


@pytest.mark.parametrize("vocab", ["2147483647", "60000000"])
def test_a_vocab_size_past_the_hosts_memory_is_one_line_before_the_run_folder(
    tmp_path: Path, vocab: str
) -> None:
    ids = tmp_path / "ids.npy"
    np.save(ids, (np.arange(20_000) % 500).astype(np.int64))
    out = tmp_path / "run"
    res = runner.invoke(app, ["cascade", "--size", "tiny", "--steps", "3", "--device", "cpu",
                              "--source", f"gutenberg={ids}", "--vocab-size", vocab,
                              "--sources", "only", "--out", str(out)])  # fmt: skip
    lines = [ln for ln in _lines(res.output) if not ln.startswith("preparing")]
    assert res.exit_code == 2, res.output
    assert lines[0].startswith(f"error: the tiny model with a vocabulary of {int(vocab):,} has "), (
        lines
    )
    assert "of memory free" in lines[0] and lines[1].startswith("hint: lower --vocab-size"), lines
    assert not out.exists()


def test_the_gpt_check_counts_adams_state_on_the_cpu_and_weights_on_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from andrea_diag.config import RunConfig

    cfg = RunConfig(size="tiny", vocab_size=1_000_000)
    n = cfg.model.n_params()
    monkeypatch.setattr(factories, "available_memory", lambda: n * 8)  # between 4 and 16 B
    factories.check_gpt_fits(cfg, "cuda")  # the weights fit
    with pytest.raises(factories.UserError, match="weights, gradients and Adam's moments"):
        factories.check_gpt_fits(cfg, "cpu")


def test_a_small_bf16_microbatch_is_judged_by_its_own_wider_tolerance() -> None:
    spec = accum_check.AccumSpec(precision="bf16", micro_batch=1, accum=2, seq_len=4)
    assert spec.validate().name == "tiny"  # bf16's tolerance (2 eps) is far above fp32 drift
