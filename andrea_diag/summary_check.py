"""A run's ``summary.json`` checked against the run's own metrics table and ``config.json``.

    summary, said = checked_summary(summary, config, metrics, path)
    # said: None, or one line naming what disagreed ("final_loss 2.6 (summary) vs 3.72 ...")

The trainer writes the summary at close as a digest of ``metrics.jsonl`` (``train/summary.py``
``summarize``); the table is the record, the summary a copy of a few of its figures. A summary
copied from a sibling arm (``cp global/summary.json none/``), left from another run or edited
by hand put that run's final loss, held-out loss and max grad norm on this arm's page (and in
its export) without a word. So, for a summary the trainer wrote (it names its ``arm``):

- each figure the table determines (:data:`FIGURES`) is computed from it by the trainer's rule
  (:func:`table_figures`), and where the summary's differs, the table's is used;
- a summary that records another clip, size, lr or max_norm than ``config.json`` is named as
  another run's (the label ``arm`` is not compared: a user may rename an arm);
- either is one warning line, which the report shows on the page too. The summary's other
  fields (spikes, pollution, verdict) the table cannot vouch for: they are kept, and the line
  says they may be another run's.

A summary that does not name its arm is not the trainer's (``SpikeMonitor`` writes
``kind: monitor`` and no loss figures; an older or hand-made one may compute them otherwise):
it is left as it is.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.errors import visible
from andrea_diag.metrics import CLIPPED_BELOW

log = logging.getLogger("andrea_diag.record")

# the summary's figures the metrics table determines, each as the trainer computes it
FIGURES = ("n_updates", "final_loss", "min_loss", "max_grad_norm", "median_grad_norm",
           "pct_clipped", "final_eval_loss", "min_eval_loss", "final_eval_update")  # fmt: skip
IDENTITY = ("clip", "size", "lr", "max_norm")  # what the run is, in summary and config alike
_REL_TOL = 1e-9  # the same rule on the same float64 values: equal but for summation order


def _finite(df: pd.DataFrame, col: str) -> pd.Series:
    values = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return values[values.map(math.isfinite)]


def table_figures(df: pd.DataFrame) -> dict[str, Any]:
    """The :data:`FIGURES` a cleaned metrics table (``runread.clean_table``) determines: the one
    rule, which ``train/summary.py`` writes the summary with; a figure whose column the table
    lacks is left out."""
    out: dict[str, Any] = {"n_updates": len(df)}
    if "loss" in df:
        finite = _finite(df, "loss")
        # the last tenth of the finite losses, 1 to 10 of them: one noisy batch is not the end
        tail = finite.tail(max(1, min(10, len(finite) // 10 or 1)))
        out["final_loss"] = float(tail.mean()) if len(tail) else None
        out["min_loss"] = float(finite.min()) if len(finite) else None
    if "grad_norm" in df:
        gn = _finite(df, "grad_norm")
        out["max_grad_norm"] = float(gn.max()) if len(gn) else None
        out["median_grad_norm"] = float(gn.median()) if len(gn) else None
    if "clip_coef" in df and len(df):
        coef = pd.to_numeric(df["clip_coef"], errors="coerce")
        out["pct_clipped"] = float(100.0 * (coef < CLIPPED_BELOW).mean())
    if "eval_loss" not in df or "update" in df:
        out.update({k: v for k, v in eval_fields(df).items() if k in FIGURES})
    return out


def eval_fields(df: pd.DataFrame) -> dict[str, Any]:
    """The held-out numbers every comparison reads: the last evaluation, and the best one (and
    the last of each per-source ``eval_loss_*`` column)."""
    if "eval_loss" not in df:
        return {"final_eval_loss": None, "min_eval_loss": None}
    ev = df[pd.to_numeric(df["eval_loss"], errors="coerce").notna()]
    last = ev.iloc[-1] if len(ev) else None
    out: dict[str, Any] = {
        "final_eval_loss": float(last["eval_loss"]) if last is not None else None,
        "min_eval_loss": float(ev["eval_loss"].astype("float64").min()) if len(ev) else None,
        "final_eval_update": int(last["update"]) if last is not None else None,
    }
    for col in [c for c in df.columns if c.startswith("eval_loss_")]:
        out[f"final_{col}"] = float(last[col]) if last is not None else None
    return out


def _same(a: Any, b: Any) -> bool:
    """Whether two figures agree: None and NaN are both "not measured"."""
    gone_a = a is None or (isinstance(a, float) and math.isnan(a))
    gone_b = b is None or (isinstance(b, float) and math.isnan(b))
    if gone_a or gone_b:
        return gone_a and gone_b
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)):
        return a == b
    if not isinstance(b, (int, float)):
        return False
    return a == b or math.isclose(float(a), float(b), rel_tol=_REL_TOL)


def _shown(v: Any) -> str:
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:.6g}"
    return "-" if v is None else str(v)[:40]


def checked_summary(
    summary: dict[str, Any] | None, config: dict[str, Any] | None, metrics: pd.DataFrame, path: Path
) -> tuple[dict[str, Any] | None, str | None]:
    """(``summary`` with the table's figures where they differ, one line naming what differed
    or None); the line is also logged. Both dicts cleaned already (``runread.clean``)."""
    if not summary or "arm" not in summary or metrics.empty:
        return summary, None
    config = config or {}
    other = [f"{k} {_shown(summary[k])} (config.json: {_shown(config[k])})" for k in IDENTITY
             if k in summary and k in config and not _same(summary[k], config[k])]  # fmt: skip
    table = table_figures(metrics)
    differ = [k for k in FIGURES if k in summary and k in table and not _same(summary[k], table[k])]
    if not other and not differ:
        return summary, None
    whose = "another run's" if other else "not what its own metrics table says"
    parts = other + [f"{k} {_shown(summary[k])} (table: {_shown(table[k])})" for k in differ]
    said = visible(  # printed: a field's text must not drive the terminal
        f"{path} is {whose}: " + "; ".join(parts) + ". The table's figures are shown; the "
        "summary's spike, pollution and verdict fields may be another run's"
    )
    log.warning("%s", said)
    return {**summary, **{k: table[k] for k in differ}}, said
