"""Apply the ladder's pre-registered stress-lr rule (reports/ladder/README.md) to the pilot's cells.

The unigram level is the cross-entropy (nats) of each source's held-out tail under the unigram
frequencies of the training parts of all streams (add-one smoothed, so a token unseen in training
costs a finite amount), averaged over the three sources: the loss of a model that ignores context.
The stress lr is the largest pilot lr at which every clipped 120m seed ends below that level.

    python bench/stress_lr.py reports/ladder/pilot > reports/ladder/pilot/decision.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from andrea_diag.data import prepare_data
from andrea_diag.data.heldout import split_point, training_part


def unigram_level() -> dict[str, float]:
    data = prepare_data()
    v = data.vocab_size
    counts = torch.ones(v, dtype=torch.float64)  # add-one
    for s in data.streams.values():
        counts += torch.bincount(training_part(s), minlength=v).double()
    logp = (counts / counts.sum()).log()
    per = {}
    for name, s in data.streams.items():
        tail = s[split_point(s.numel()) :]
        per[name] = float(-logp[tail].mean())
    return {"per_source": per, "mean": sum(per.values()) / len(per)}


def main(folder: Path) -> dict:
    level = unigram_level()
    rows = []
    for p in sorted(folder.glob("*/global/summary.json")):
        s = json.loads(p.read_text())
        rows.append(
            {
                "cell": p.parent.parent.name,
                "size": s["size"],
                "lr": s["lr"],
                "final_eval_loss": s["final_eval_loss"],
            }
        )
    lrs = sorted({r["lr"] for r in rows})
    learns = {
        lr: [
            r["final_eval_loss"] < level["mean"]
            for r in rows
            if r["size"] == "120m" and r["lr"] == lr
        ]
        for lr in lrs
    }
    ok = [lr for lr in lrs if learns[lr] and all(learns[lr])]
    return {
        "rule": "largest pilot lr at which both clipped 120m seeds end below the unigram level",
        "unigram_level": level,
        "clipped_arms": rows,
        "clipped_120m_learns": {str(k): v for k, v in learns.items()},
        "stress_lr": max(ok) if ok else 1e-3,
        "fallback": not ok,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=2))
