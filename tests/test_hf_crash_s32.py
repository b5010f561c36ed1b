"""s32: the Hugging Face callback where ``trainer.train()`` ends by an exception, and an update
whose loss the callback never saw.

- transformers tells no callback that ``train()`` raised (no ``on_exception``): the run was
  left open, its lock held, with neither ``summary.json`` nor ``partial_summary.json``, where
  Lightning's ``on_exception`` closes it as crashed. It is now closed as crashed at the end of
  the callback's ``with`` block, else at the interpreter's exit (``atexit``).
- An update in which the callback saw no loss recorded ``microbatches`` 1 whatever ran: it now
  records the microbatches it saw run (0 when it saw none), as Lightning's callback records 0
  for a group without a backward.

    pytest tests/test_hf_crash_s32.py -q
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from andrea_diag.record import load_run

VOCAB, T, BATCH, FAIL_AT = 64, 16, 2, 2  # the loss raises in the third update: 2 rows kept
TESTS = Path(__file__).resolve().parent


def failing_trainer(run: Path, out: Path, error: type[BaseException]) -> Any:
    """A tiny GPT-2 ``Trainer`` (4 updates) whose loss raises ``error`` at update FAIL_AT + 1,
    with an ``AndreaDiagCallback`` into ``run`` (the subprocess test imports it too)."""
    import transformers

    from andrea_diag.integrations.hf import AndreaDiagCallback

    class Failing(transformers.Trainer):
        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            if self.state.global_step == FAIL_AT:
                raise error("boom in the loss")
            return super().compute_loss(*args, **kwargs)

    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=32, n_layer=1,
                                     n_head=2, bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (16, T), generator=torch.Generator().manual_seed(0))
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=4, per_device_train_batch_size=BATCH, use_cpu=True,
        report_to=[], save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    return Failing(
        model=transformers.AutoModelForCausalLM.from_config(config),
        args=args,
        train_dataset=[{"input_ids": row, "labels": row} for row in ids],
        callbacks=[AndreaDiagCallback(run, lockin=False)],
    )


def _closed_as_crashed(run: Path, error: str) -> None:
    """Closed as Lightning's ``on_exception`` closes a run: partial summary, lock released,
    the rows of the updates done kept."""
    partial = json.loads((run / "partial_summary.json").read_text())
    assert (partial["status"], partial["error"]) == ("crashed", error)
    assert partial["n_updates"] == FAIL_AT
    assert not (run / "summary.json").exists() and not (run / "run.lock").exists()
    assert load_run(run)["metrics"]["update"].tolist() == list(range(1, FAIL_AT + 1))


def test_hf_train_interrupted_inside_the_callbacks_with_block_is_closed_as_crashed(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    trainer = failing_trainer(tmp_path / "run", tmp_path / "out", KeyboardInterrupt)
    from andrea_diag.integrations.hf import AndreaDiagCallback

    (callback,) = [
        c for c in trainer.callback_handler.callbacks if isinstance(c, AndreaDiagCallback)
    ]
    with pytest.raises(KeyboardInterrupt, match="boom"), callback:
        trainer.train()
    _closed_as_crashed(tmp_path / "run", "KeyboardInterrupt")
    assert not trainer.model._forward_hooks  # the hooks and the training_step wrap removed
    assert "training_step" not in trainer.__dict__


def test_hf_train_raising_at_the_top_level_is_closed_as_crashed_at_interpreter_exit(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    script = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "from pathlib import Path\n"
        "from test_hf_crash_s32 import failing_trainer\n"
        f"failing_trainer(Path({str(tmp_path / 'run')!r}), Path({str(tmp_path / 'out')!r}), "
        "RuntimeError).train()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 1 and "RuntimeError: boom in the loss" in done.stderr
    _closed_as_crashed(tmp_path / "run", "RuntimeError")


def _by_hand(run: Path, accumulate: int = 1) -> tuple[Any, Any, Any, Any]:
    """An ``AndreaDiagCallback`` started by hand (no Trainer) on a model whose output shows no
    loss: (callback, model, optimizer, the events' args)."""
    from andrea_diag.integrations.hf import AndreaDiagCallback

    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    callback = AndreaDiagCallback(run, lockin=False)
    args = SimpleNamespace(gradient_accumulation_steps=accumulate, max_grad_norm=0.0)
    callback.on_train_begin(args, SimpleNamespace(max_steps=2, global_step=0), None,
                            model=model, optimizer=opt)  # fmt: skip
    return callback, model, opt, args


def _update(callback: Any, opt: Any, args: Any) -> None:
    callback.on_pre_optimizer_step(args, None, None)
    opt.step()
    callback.on_optimizer_step(args, None, None)
    opt.zero_grad()


def test_hf_with_block_ending_with_the_run_open_closes_it_as_training_not_ended(
    tmp_path: Path,
) -> None:
    """The exception that stopped training was caught inside the block: the run did not end
    (no ``on_train_end``), so it is not recorded as a finished one."""
    pytest.importorskip("transformers")
    callback, model, opt, args = _by_hand(tmp_path / "run")
    with warnings.catch_warnings(), callback:
        warnings.simplefilter("ignore")  # the no-loss warning
        model(torch.randn(3, 4)).square().mean().backward()
        _update(callback, opt, args)
    partial = json.loads((tmp_path / "run" / "partial_summary.json").read_text())
    assert (partial["status"], partial["error"]) == ("crashed", "TrainingNotEnded")
    assert not (tmp_path / "run" / "summary.json").exists()


def test_hf_with_block_raising_after_the_run_ended_keeps_it_finished(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    callback, model, opt, args = _by_hand(tmp_path / "run")
    with pytest.raises(ValueError), warnings.catch_warnings(), callback:
        warnings.simplefilter("ignore")
        model(torch.randn(3, 4)).square().mean().backward()
        _update(callback, opt, args)
        callback.on_train_end(args, None, None)
        raise ValueError("an evaluation after train() failed")
    assert (tmp_path / "run" / "summary.json").exists()
    assert not (tmp_path / "run" / "partial_summary.json").exists()


def test_hf_update_without_a_seen_loss_records_the_microbatches_that_ran(tmp_path: Path) -> None:
    """Run by hand, accumulation 2: the first update's two forwards are counted though their
    loss is unseen; the second's gradient came from a submodule, no forward of the model
    seen: 0. Both recorded 1."""
    pytest.importorskip("transformers")
    callback, model, opt, args = _by_hand(tmp_path / "run", accumulate=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the no-loss warning
        for _ in range(2):
            model(torch.randn(3, 4)).square().mean().backward()
        _update(callback, opt, args)
        model[0](torch.randn(3, 4)).square().mean().backward()  # not through the hooked model
        _update(callback, opt, args)
    callback.on_train_end(args, None, None)
    metrics = load_run(tmp_path / "run")["metrics"]
    assert metrics["microbatches"].tolist() == [2, 0]
    assert all(math.isnan(x) for x in metrics["loss"])


def test_hf_callback_dropped_with_its_run_open_is_not_kept_alive_for_the_exit_close(
    tmp_path: Path,
) -> None:
    """A search loop that catches a failed ``train()`` and drops the callback: the exit close
    must not pin the callback, and with it the model and optimizer, until the process ends."""
    pytest.importorskip("transformers")
    import gc
    import weakref

    from andrea_diag.integrations import hf

    callback, model, opt, _ = _by_hand(tmp_path / "run")
    assert callback in hf._OPEN  # open: closed at exit if still open then
    gone = weakref.ref(model)
    del callback, model, opt
    gc.collect()
    assert gone() is None


def test_hf_exit_close_of_a_run_whose_folder_was_removed_is_no_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    import shutil

    from andrea_diag.integrations import hf

    callback, *_ = _by_hand(tmp_path / "run")
    shutil.rmtree(callback.monitor.run_dir)  # a temporary folder the exception passed through
    hf._close_open_runs()  # what the interpreter's exit runs
    assert not (tmp_path / "run").exists() and capsys.readouterr().err == ""
    hf._OPEN.discard(callback)  # this process goes on: not closed again at its exit
