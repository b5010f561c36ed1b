"""SpikeMonitor and the trainer share one probe driver: a user's loop that makes the README
snippet's four calls on a tiny `train`'s own batches records the same probe columns, bit for bit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch

from andrea_diag import metrics
from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.config import RunConfig
from andrea_diag.data import BatchPlan, prepare_data
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.model import GPT
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.train.accumulation import accumulate_group
from andrea_diag.train.loop import PROMPT_TOKENS
from andrea_diag.train.optim import build_optimizer

STEPS = 40  # past the spike warm-up (10 updates) and across bandit phase boundaries
# columns the trainer's loop and evaluator write (the monitor's own loop writes its own):
# everything else in the trainer's rows comes from a probe and must match bit for bit
NOT_PROBES = {metrics.LOOP, metrics.EVALUATOR}


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_monitor_in_a_user_loop_records_the_trainers_probe_rows(tmp_path: Path) -> None:
    cfg = RunConfig(size="tiny", steps=STEPS, clip="global", device="cpu")
    run_cascade(CascadeSpec(base=cfg, clips=["global"], out=tmp_path / "t"))
    trained = pd.read_json(tmp_path / "t" / "global" / "metrics.jsonl", lines=True)
    resolved = json.loads((tmp_path / "t" / "global" / "config.json").read_text())

    data = prepare_data(cfg.sources, seed=cfg.corpus_seed)
    plan = BatchPlan.load(tmp_path / "t" / "batch_plan.json", data)  # the trainer's batches
    torch.manual_seed(cfg.seed)  # the trainer's initial weights
    model = GPT(cfg.model)
    opt = build_optimizer(model, cfg.recipe_cfg, resolved["lr"], torch.device("cpu"))
    prompts = {n: s[:PROMPT_TOKENS] for n, s in data.streams.items()}
    with SpikeMonitor(model, opt, tmp_path / "m", total_steps=STEPS, prompts=prompts,
                      tokenizer=data.tokenizer) as mon:  # fmt: skip
        for update in range(1, STEPS + 1):
            batch = plan.batch(update)
            micro = [
                (batch.tokens[a, :, :-1], batch.tokens[a, :, 1:])
                for a in range(batch.tokens.size(0))
            ]
            opt.zero_grad(set_to_none=True)
            group = accumulate_group(model, micro)
            mon.after_backward(group.loss, group.example_loss,
                               example_source=batch.source_idx.reshape(-1), phase=batch.phase,
                               weights=batch.weights)  # fmt: skip
            mon.after_clip(clip_grad_norm_with_stats(model.parameters(), 1.0))
            opt.step()
            mon.after_step()
    monitored = pd.read_json(tmp_path / "m" / "metrics.jsonl", lines=True)

    assert metrics.undeclared(trained.columns) == []
    probe_cols = sorted(c for c in trained.columns if metrics.owner_of(c) not in NOT_PROBES)
    assert {"spike", "grad_norm_z", "m_spike_share", "layer_gn/h00.attention"} <= set(probe_cols)
    assert set(probe_cols) <= set(monitored.columns)
    for col in probe_cols:
        pairs = list(zip(trained[col].tolist(), monitored[col].tolist(), strict=True))
        diff = [(u, a, b) for u, (a, b) in enumerate(pairs, 1) if not _same(a, b)]
        assert not diff, f"{col} differs at (update, trainer, monitor): {diff[:3]}"
    assert trained["boundary"].any()  # the phases reached the monitor: boundaries were compared
