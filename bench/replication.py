"""The pre-registered replication's test (reports/ladder/REPLICATION.md), from its sweep.

    python3 bench/replication.py reports/ladder-replication --size 12m --lr 3e-3 \
        --precision fp16 --original reports/ladder/gaps.csv --out reports/ladder-replication/replication.json

Reads the replication sweep's ``sweep.csv`` (as ``ladder`` reads its own: untrusted, through
``read_sweep_outputs``), pairs each seed's unclipped and clipped final held-out loss (or, with
``--measure train``, the final training loss: the mean of the last 10 updates' loss on the
mixer's batches, the same batches in both arms; replication 4), and
applies the protocol fixed before the runs: the exact sign-flip test on the side the protocol
named (``--alternative``: greater, clipping helps, for replications 1 and 2; two-sided for 3)
over the new seeds only, at alpha 0.05; fewer than ``MIN_REPLICATION_PAIRS`` finished pairs is
"insufficient seeds" and no test. Beside it, descriptive only: the new seeds' intervals,
collapses (Fisher), pollution events, and the estimate pooled with the original ladder's gaps
(parsed from its ``gaps.csv``, or computed from an earlier sweep's folder), which is not a
test.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.experiments.aggregate import finished
from andrea_diag.experiments.ladder import read_sweep_outputs
from andrea_diag.stats import fisher, paired_test, seeds_needed, sign_flip_p

MIN_REPLICATION_PAIRS = 12  # fixed in REPLICATION.md before the runs
ALPHA = 0.05  # the same: one-sided, one hypothesis


# the loss a gap is taken of: sweep.csv's column, and how the verdict names it
MEASURES = {"eval": ("final_eval_loss", "held-out loss"),
            "train": ("final_loss", "training loss")}  # fmt: skip


def new_pairs(
    table: pd.DataFrame, size: str, lr: float, precision: str, measure: str = "eval"
) -> pd.DataFrame:
    """Per seed: the unclipped and clipped arms' loss gap (``measure``), collapse and event
    flags."""
    t = finished(table)
    t = t[(t["size"] == size) & (t["precision"] == precision) & ((t["lr"] - lr).abs() < 1e-12)]
    t = t.assign(loss=pd.to_numeric(t.get(MEASURES[measure][0]), errors="coerce"))
    arms = {c: t[t["clip"] == c].set_index("seed") for c in ("none", "global")}
    seeds = sorted(set(arms["none"].index) & set(arms["global"].index))
    return pd.DataFrame(
        {
            "seed": seeds,
            "gap": [arms["none"].at[s, "loss"] - arms["global"].at[s, "loss"] for s in seeds],
            **{f"collapsed_{c}": [bool(arms[c].at[s, "collapsed"]) for s in seeds] for c in arms},
            **{f"event_{c}": [arms[c].at[s, "event"] for s in seeds] for c in arms},
        }
    )


def original_gaps(
    path: Path, size: str, lr: float, precision: str, measure: str = "eval"
) -> list[float]:
    """The ladder's published per-seed gaps of the same cell ("s0:+0.382;s1:...") from its
    ``gaps.csv``, or an earlier sweep's gaps of ``measure`` from its folder."""
    if path.is_dir():
        gaps = new_pairs(read_sweep_outputs(path)[1], size, lr, precision, measure)["gap"]
        return [float(g) for g in gaps if math.isfinite(g)]
    if measure != "eval":
        raise SystemExit("--original: a gaps.csv holds held-out gaps; give a sweep folder")
    g = pd.read_csv(path)
    row = g[(g["size"] == size) & (g["precision"] == precision) & ((g["lr"] - lr).abs() < 1e-12)]
    row = row[row["clip"] == "global"]
    return [float(x.split(":")[1]) for x in str(row.iloc[0]["gaps"]).split(";")] if len(row) else []


def verdict(pairs: pd.DataFrame, original: list[float], alternative: str = "greater",
            measure: str = "eval") -> dict[str, Any]:  # fmt: skip
    """The protocol's call and its statistics. ``alternative`` is the primary test's side, fixed
    in the protocol: "greater" (clipping lowers the loss), "less" (it raises it) or
    "two-sided" (either; a sign that differs from the original seeds' is said so)."""
    gaps = [g for g in pairs["gap"] if math.isfinite(g)]
    test = paired_test(gaps)
    n = len(gaps)
    p = sign_flip_p(gaps, alternative=alternative) if n >= MIN_REPLICATION_PAIRS else math.nan
    k_u, k_c = int(pairs["collapsed_none"].sum()), int(pairs["collapsed_global"].sum())
    events = {
        c: [bool(e) for e in pairs[f"event_{c}"] if e is not None] for c in ("none", "global")
    }
    pooled = paired_test([*original, *gaps])
    dropped = [f"s{s}" for s, g in zip(pairs["seed"], pairs["gap"], strict=True)
               if not math.isfinite(g)]  # fmt: skip
    return _strict({
        "protocol": "reports/ladder/REPLICATION.md",
        "call": _call(test, p, n, alternative, original, MEASURES[measure][1]),
        "measure": MEASURES[measure][0],
        "pairs": n,
        "dropped_non_finite": dropped,
        "alternative": alternative,
        "p_primary": p,
        "alpha": ALPHA,
        "gaps": {f"s{s}": round(g, 6) for s, g in zip(pairs["seed"], pairs["gap"], strict=True)
                 if math.isfinite(g)},
        "mean": test.mean, "sd": test.sd, "bootstrap_95": [test.bca.lo, test.bca.hi],
        "t_95": [test.t.lo, test.t.hi], "p_two_sided": test.p,
        "collapses": {"none": k_u, "global": k_c, "of": len(pairs),
                      "fisher_p": fisher(k_u, len(pairs), k_c, len(pairs))},
        "pollution_events": {c: f"{sum(v)}/{len(v)}" for c, v in events.items()},
        "pooled_descriptive": {"pairs": pooled.n, "mean": pooled.mean, "sd": pooled.sd,
                               "bootstrap_95": [pooled.bca.lo, pooled.bca.hi],
                               "note": f"the {len(original)} original seeds and the "
                               "replication together: an estimate, not a test (the test of "
                               "record is the one above)"},
    })  # fmt: skip


def _call(test: Any, p: float, n: int, alternative: str, original: list[float],
          loss: str = "held-out loss") -> str:  # fmt: skip
    """The protocol's outcome rule in one sentence (REPLICATION.md); ``loss`` names the
    measure."""
    if n < MIN_REPLICATION_PAIRS:
        return f"insufficient seeds: {n} finished pairs, fewer than {MIN_REPLICATION_PAIRS}"
    side = "two-sided" if alternative == "two-sided" else "one-sided"
    tested = f"{side} sign-flip p = {p:.2g} over {n} new seeds"
    # the gap is unclipped minus clipped held-out loss: > 0 means clipping lowered it
    moved = "lowered" if test.mean > 0 else "raised"
    if p < ALPHA:
        effect = (f"clipping {moved} {loss} by {abs(test.mean):.3f} nats "
                  f"(bootstrap 95% [{test.bca.lo:+.3f}, {test.bca.hi:+.3f}]), {tested}")  # fmt: skip
        first = sum(original) / len(original) if original else math.nan
        if alternative == "two-sided" and math.isfinite(first) and (first > 0) != (test.mean > 0):
            return f"opposite sign to the original seeds' {first:+.3f} nats: {effect}"
        return f"replicated: {effect}"
    claimed = {"greater": "lower", "less": "raise"}.get(alternative)
    wrong_side = claimed is not None and (test.mean > 0) != (alternative == "greater")
    if wrong_side or test.mean == 0:
        which = f"clipping did not {claimed or 'move'} {loss} on average"
        return (
            f"not replicated: mean gap {test.mean:+.3f} nats over {n} new seeds ({which}), {tested}"
        )
    # the protocol's own test: its side and alpha, and never fewer seeds than it runs on
    need = seeds_needed(test.sd, gap=abs(test.mean), alpha=ALPHA, alternative=alternative)
    need = max(need, MIN_REPLICATION_PAIRS) if need else None
    return (f"not replicated: mean gap {test.mean:+.3f} nats over {n} new seeds, {tested}; "
            f"a gap of that size would need {need if need else 'more than any feasible number of'}"
            f" seeds (80% power, {side} paired t)")  # fmt: skip


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float as None: json.dumps writes NaN, which is not JSON
    (a strict reader such as jq or JSON.parse refuses the whole file)."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--size", default="12m")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--original", type=Path, default=Path("reports/ladder/gaps.csv"))
    ap.add_argument("--alternative", choices=("greater", "less", "two-sided"), default="greater",
                    help="the primary test's side, as the protocol fixed it (greater: clipping "
                    "lowers held-out loss)")  # fmt: skip
    ap.add_argument("--measure", choices=tuple(MEASURES), default="eval",
                    help="the loss the gap is taken of: eval (final held-out loss) or train "
                    "(final training loss, the last 10 updates' mean)")  # fmt: skip
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    _, table = read_sweep_outputs(a.sweep)
    pairs = new_pairs(table, a.size, a.lr, a.precision, a.measure)
    original = original_gaps(a.original, a.size, a.lr, a.precision, a.measure)
    result = verdict(pairs, original, a.alternative, a.measure)
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
