"""Runs made to collapse on purpose: a burst at a late update, on the tiny model.

    python3 bench/lockin_burst.py OUT --kind repeat [--steps 330 --lr 3e-3 --burst-at 300 \
        --burst-len 15 --device cpu]
    python3 bench/lockin_burst.py OUT --kind lr --burst-factor 30 [...]

Trains one unclipped arm through the toolkit's own Trainer (the same loop as ``andrea-diag
train``), except during updates ``burst-at`` .. ``burst-at + burst-len - 1``:

- ``--kind repeat``: every training sequence is the corpus's most frequent token, repeated.
  The model learns to predict that token everywhere: the degenerate attractor of the seeds
  (one token's logit dominates the softmax), planted after the model has learned;
- ``--kind lr``: the recipe's learning rate times ``burst-factor``; an Adam step that large
  moves every weight by about ``lr · factor``: what a late spike does to an unclipped arm.

Then ``bench/label_fixture.py OUT --label positive ...`` keeps the verdict's inputs as a fixture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's andrea_diag


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kind", choices=("repeat", "lr"), default="repeat")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=330)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--burst-at", type=int, default=300)
    ap.add_argument("--burst-len", type=int, default=15)
    ap.add_argument("--burst-factor", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)

    from andrea_diag.config import ProbeConfig, RunConfig
    from andrea_diag.data import BatchPlan, Mixer, prepare_data
    from andrea_diag.train.loop import Trainer

    cfg = RunConfig(size=args.size, steps=args.steps, lr=args.lr, clip="none", seed=args.seed,
                    device=args.device, checkpoint_every=0,
                    probes=ProbeConfig(shadow=False)).resolve()  # fmt: skip
    data = prepare_data(cfg.sources, seed=cfg.corpus_seed)
    plan = BatchPlan(data, Mixer(seed=cfg.seed, policy=cfg.mixer), seed=cfg.seed,
                     micro_batch=cfg.micro_batch, accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
    trainer = Trainer(cfg, args.out, data, plan)
    base = trainer.scheduler.lr_lambdas[0]
    lo, hi, f = args.burst_at, args.burst_at + args.burst_len, args.burst_factor

    def burst(n: int) -> float:
        # LambdaLR's n-th value is the factor of update n + 1 (train/optim.py)
        return base(n) * (f if lo <= n + 1 < hi else 1.0)

    if args.kind == "lr":
        trainer.scheduler.lr_lambdas[0] = burst
    else:
        import dataclasses

        import torch

        top = int(torch.as_tensor(data.token_counts).argmax())  # the most frequent token id
        batch_of = plan.batch

        def repeated(update: int) -> object:
            b = batch_of(update)
            if not lo <= update < hi:
                return b
            return dataclasses.replace(b, tokens=torch.full_like(b.tokens, top))

        plan.batch = repeated  # type: ignore[method-assign]
    summary = trainer.run()
    lock = summary.get("lockin") or {}
    print(f"{args.out}: verdict {lock.get('verdict')}: {'; '.join(lock.get('reasons') or [])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
