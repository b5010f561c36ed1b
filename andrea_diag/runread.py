"""Validated reading of a run directory's files: each file kind has the shape its readers expect.

    from andrea_diag.runread import clean, CONFIG, read_parquet, clean_table
    config = clean(read_json(run_dir / "config.json", "config.json", kind=dict), CONFIG, "config.json")
    metrics = clean_table(read_parquet(run_dir / "metrics.parquet"), "metrics", path)

A run directory is untrusted input (:mod:`andrea_diag.rundir`). The report and the export do
arithmetic and formatting on what they read, so a field of the wrong type (a list where a number
belongs, ``"steps": "16"``) must not reach them: :func:`clean` drops every field whose type is
not the declared one (the page then shows "-", and a warning names the field), and
:func:`clean_table` makes every column of a metrics, events or samples table the kind its
readers expect (numbers, text, flags). What cannot be repaired, a row of metrics without an
update number or a parquet file that is not parquet, is one :class:`UserError` line.

Fields not declared here pass unchanged: a reader of one must check its type itself.
"""

from __future__ import annotations

import logging
import math
import numbers
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag import metrics as metrics_schema
from andrea_diag.errors import UserError
from andrea_diag.fields import shown_number
from andrea_diag.given_checks import given_path
from andrea_diag.jsonl_read import read_jsonl
from andrea_diag.parquet_read import read_parquet
from andrea_diag.rundir import (
    DAMAGED,
    child,
    read_json,
)
from andrea_diag.summary_check import checked_summary

log = logging.getLogger("andrea_diag.record")

MAX_UPDATE = 2**53  # an update number a float holds exactly; past it, a table is damaged
MAX_ARMS = 1_000  # a cascade's arms are clip rules, each a trained model: a handful, not 1,000
NUM, INT, STR, BOOL, LIST, DICT = "num", "int", "str", "bool", "list", "dict"
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "NaN": math.nan}

CONFIG: dict[str, Any] = {
    "size": STR, "recipe": STR, "clip": STR, "arm": STR, "precision": STR, "device": STR,
    "max_norm": NUM, "lr": NUM, "steps": INT, "micro_batch": INT, "accum": INT,
    "seq_len": INT, "seed": INT, "replicas": INT, "eval_every": INT, "boundary_k": INT,
    "probes": {"boundary_k": INT}, "clip_params": DICT,
    "model_config": {"n_params": INT, "vocab_size": INT},  # vocab: the report's lock-in verdict
    "effective_batch": {"m": INT, "A": INT, "D": INT, "examples": INT, "tokens": INT},
}  # fmt: skip
ENV: dict[str, Any] = {
    "andrea_diag": STR, "python": STR, "platform": STR, "torch": STR, "cuda": STR,
    "gpu": STR, "cpu_threads": INT, "git_commit": STR, "started": STR,
}  # fmt: skip
SOURCE: dict[str, Any] = {
    "generated": BOOL, "origin": STR, "n_bytes": INT, "n_tokens": INT, "sha256": STR,
    "n_docs": INT,
}  # fmt: skip
SUMMARY: dict[str, Any] = {
    "final_loss": NUM, "final_eval_loss": NUM, "min_eval_loss": NUM, "min_loss": NUM,
    "max_grad_norm": NUM,
    "median_grad_norm": NUM, "pct_clipped": NUM, "pct_skipped": NUM, "clip_ms_median": NUM,
    "wall_s": NUM, "n_updates": INT, "n_boundaries": INT, "nonfinite_updates": INT,
    "status": STR, "error": STR, "probe_failures": LIST,
    "spikes": {
        "n_spikes": INT, "n_grad_spikes": INT, "n_loss_spikes": INT, "n_cascades": INT,
        "spike_score_loss": NUM, "spike_score_grad": NUM, "by_cause": DICT,
        "spike_updates": LIST, "thresholds": {"boundary_k": INT},
    },
    "pollution": {
        "max_m_share": NUM, "max_v_share": NUM, "recovery_m": NUM, "recovery_v": NUM,
        "final_v_share": NUM,
        "shadow_bytes": INT, "has_moments": BOOL, "shadow": BOOL,
    },
    "lockin": {"verdict": STR, "reason": STR, "reasons": LIST, "thresholds": DICT,
               "collapse": BOOL, "unigram_entropy": NUM},
}  # fmt: skip
CASCADE: dict[str, Any] = {
    "size": STR, "seed": INT, "status": STR, "command": STR, "arms": LIST, "lr": NUM,
    "max_norm": NUM, "recipe": STR, "steps": INT, "replicas": INT,
}  # fmt: skip
SWEEP: dict[str, Any] = {
    "sizes": LIST, "lrs": LIST, "max_norms": LIST, "seeds": LIST, "clips": LIST,
    "precisions": LIST, "steps": INT, "recipe": STR, "plotly": STR, "command": STR,
    "cells": LIST, "status": STR,
    "throughput": {"updates_per_s": NUM, "updates": INT, "wall_s": NUM, "executor": STR,
                   "jobs": INT,
                   # experiments/gpu_busy.py; ``devices``' entries are checked by their reader
                   "gpu_busy": {"pct_mean": NUM, "pct_min": NUM, "pct_max": NUM,
                                "n_samples": INT, "source": STR, "devices": DICT}},
}  # fmt: skip

# Table columns that hold text, flags or lists; every other column is a number.
TEXT_COLUMNS = {
    "metrics": {"batch_hash", "injected", "phase_name", "source"},
    "events": {"metric", "cause", "outlier_source", "kind", "probe", "hook", "error",
               "close_error"},
    "samples": {"source", "mode", "text", "prompt"},
}  # fmt: skip
FLAG_COLUMNS = {"metrics": {"boundary", "nonfinite", "applied", "skipped", "eval"}}
LIST_COLUMNS = {"events": {"causes", "cascade"}}


_FLOAT_MAX = int(sys.float_info.max)


def _number(v: Any, integer: bool) -> tuple[bool, Any]:
    """(ok, value) for a JSON number field: non-finite floats arrive as strings."""
    if isinstance(v, str) and v in _NONFINITE and not integer:
        return True, _NONFINITE[v]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False, None
    if integer:
        if isinstance(v, float) and not v.is_integer():
            return False, None
        v = int(v)
        # past 2**63 no writer of ours gets; a reader's float math on it would overflow
        return (True, v) if abs(v) < 2**63 else (False, None)
    if isinstance(v, int) and abs(v) >= _FLOAT_MAX:  # JSON integers are unbounded; floats not
        return False, None
    return True, v


def _fits(v: Any, kind: Any) -> tuple[bool, Any]:
    if v is None:
        return True, None  # null: "not measured", every reader handles it
    if kind in (NUM, INT):
        return _number(v, kind == INT)
    want = {STR: str, BOOL: bool, LIST: list, DICT: dict}[kind]
    return isinstance(v, want), v


def _unfit(v: Any, kind: Any) -> str:
    """Why ``v`` failed ``kind``: a whole number past what any run writes, else its type."""
    whole = type(v) is int or (type(v) is float and kind == INT and v.is_integer())
    if kind in (NUM, INT) and whole:
        return f"is out of range ({shown_number(v)})"
    return f"has the wrong type ({type(v).__name__})"


def clean(obj: Any, spec: dict[str, Any], what: str) -> dict[str, Any]:
    """``obj`` with every declared field of the wrong type dropped (nested dicts cleaned too)."""
    if not isinstance(obj, dict):
        return {}
    out = dict(obj)
    for key, kind in spec.items():
        if key not in out:
            continue
        v = out[key]
        if isinstance(kind, dict):
            ok, v = isinstance(v, dict) or v is None, clean(v, kind, f"{what} {key}")
        else:
            ok, v = _fits(v, kind)
        if ok:
            out[key] = v
        else:
            log.warning("%s: field %r %s; shown as -", what, key, _unfit(out[key], kind))
            del out[key]
    return out


def clean_data(obj: Any, what: str = "data.json") -> dict[str, Any]:
    """data.json: its ``sources`` (or, in old runs, the top level) as name -> clean source."""
    if not isinstance(obj, dict):
        return {}
    out = dict(obj)
    sources = obj.get("sources", obj)
    if not isinstance(sources, dict):
        sources = {}
    cleaned = {str(k): clean(v, SOURCE, f"{what} {k}") for k, v in sources.items()
               if isinstance(v, dict)}  # fmt: skip
    if "sources" in obj:
        out["sources"] = cleaned
        return out
    return cleaned


NUMERIC_PREFIXES = (
    "update", "loss", "grad_norm", "clip_", "lr", "w_", "layer_gn/", "eval_", "m_", "v_",
    "value", "z", "distinct_", "top_token", "longest", "time_s", "max_logit", "mean_entropy",
)  # fmt: skip


def _numeric_name(col: str, kind: str) -> bool:
    """A column every reader does arithmetic on (a column of text under it is damage): by its
    prefix, or in a metrics table by the schema (``lockin/mean_entropy`` all text was a
    TypeError that refused the whole page)."""
    if col.startswith(NUMERIC_PREFIXES):
        return True
    declared = metrics_schema.lookup(col) if kind == "metrics" else None
    return declared is not None and declared.kind in (int, float)


def to_float(v: Any) -> float:
    """A cell as a float: text and numbers read, anything else (a bool, past the float range) NaN."""
    if isinstance(v, str):
        v = _NONFINITE.get(v, v)
        try:
            return float(v)
        except ValueError:
            return math.nan
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return math.nan
    try:
        return float(v)
    except OverflowError:  # a JSON integer past the float range: damage, a gap
        return math.nan


def _text(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None  # a gap in a text column stays a gap
    return str(v)


def _flag(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    try:
        return bool(v) and v == v  # NaN is not a flag
    except (TypeError, ValueError):
        return False


def clean_table(df: pd.DataFrame, kind: str, path: Path) -> pd.DataFrame:
    """``df`` with every column of the type its readers expect (``kind``: metrics, events,
    samples). A metrics row without an update number is refused: rows are placed by it."""
    if df.empty:
        return df
    df = df.set_axis([str(c) for c in df.columns], axis=1)
    df = df.loc[:, ~df.columns.duplicated()]
    text, flags, lists = (TEXT_COLUMNS.get(kind, set()), FLAG_COLUMNS.get(kind, set()),
                          LIST_COLUMNS.get(kind, set()))  # fmt: skip
    cols = {}
    for col in df.columns:
        s = df[col]
        if col in text:
            s = s.map(_text)
        elif col in flags:
            s = s.map(_flag).astype(bool)
        elif col in lists:
            s = s.map(lambda v: [str(x) for x in v] if isinstance(v, (list, tuple)) else None)
        elif pd.api.types.is_bool_dtype(s) or pd.api.types.is_numeric_dtype(s):
            pass
        elif _numeric_name(col, kind) or not s.map(lambda v: isinstance(v, str) or v is None).all():
            s = s.map(to_float).astype("float64")  # a wrong value is a gap, not a crash
        cols[col] = s
    # one frame of them: set one by one into ``df``, each copied it (table_width.py)
    df = pd.DataFrame(cols, index=df.index)
    if kind == "metrics" and "update" not in df:  # rows are placed, paired and exported by it
        raise UserError(f"{path}: its rows have no update column", hint=DAMAGED)
    if "update" in df:
        u = df["update"]
        bad = u.isna() | (u != u.round()) | (u.abs() > MAX_UPDATE)  # inf is above it too
        if bad.any() and kind == "metrics":
            raise UserError(f"{path}: {int(bad.sum())} row(s) have no valid update number",
                            hint=DAMAGED)  # fmt: skip
        if kind == "events" and "kind" in df:  # a probe failure at close has no update
            bad &= ~(df["update"].isna() & (df["kind"] == "probe_failure"))
        df = df[~bad].copy()
        if not df["update"].isna().any():
            df["update"] = df["update"].astype("int64")
        if kind == "metrics":  # a table out of order (hand-merged, or two concatenated): the
            # report's "final" loss is its last row's, which must be the last update's
            df = df.sort_values("update", kind="stable")
    return df.reset_index(drop=True)


def _opt_json(run_dir: Path, name: str, spec: dict[str, Any] | None) -> Any:
    """A side file as a cleaned dict (runread.py), or None when absent."""
    p = run_dir / name
    if not (p.exists() or p.is_symlink()):
        return None
    value = read_json(p, name, kind=dict)
    if name == "data.json":
        return clean_data(value, str(p))
    return clean(value, spec, str(p)) if spec is not None else value


def read_metrics(run_dir: Path) -> pd.DataFrame:
    """The run's metrics table, cleaned (:func:`clean_table`): ``metrics.parquet`` where one
    is (or a link or FIFO in its place: refused), else ``metrics.jsonl`` (absent: empty)."""
    table = run_dir / "metrics.parquet"
    if table.exists() or table.is_symlink():
        return clean_table(read_parquet(table), "metrics", table)
    table = run_dir / "metrics.jsonl"
    return clean_table(read_jsonl(table), "metrics", table)


def read_events(run_dir: Path) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """``events.jsonl`` as (spike events, probe-failure warnings): the file holds both
    (probes/driver.py), and only the first are events."""
    events = clean_table(read_jsonl(run_dir / "events.jsonl"), "events", run_dir / "events.jsonl")
    failures: list[dict[str, Any]] = []
    if "kind" in events:
        failed = events["kind"] == "probe_failure"
        failure_cols = ["kind", "probe", "hook", "error", "close_error"]
        failures = [
            {k: v for k, v in r.items() if k in ("update", *failure_cols) and pd.notna(v)}
            for r in events[failed].to_dict("records")
        ]
        events = events[~failed].drop(columns=failure_cols, errors="ignore")
    return events, failures


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """Everything the report needs from a run directory, each file checked for the shape its
    readers expect (:mod:`andrea_diag.runread`): a damaged file is one UserError line, and so
    is a ``run_dir`` that names no folder (``""`` is not the working folder, as on the command
    line: :func:`andrea_diag.given_checks.given_path`); one not a str or a path, a TypeError.
    A summary the trainer wrote is checked against the metrics table
    (:mod:`andrea_diag.summary_check`): ``summary_mismatch`` says how it differed, or is None."""
    run_dir = given_path(run_dir, "load_run: run_dir")
    try:
        is_run = (run_dir / "config.json").exists()
    except OSError as e:  # past PATH_MAX in all, each part short: ENAMETOOLONG from pathlib
        raise UserError(f"cannot look up {run_dir}: {e.strerror or e}") from None
    if not is_run:
        raise UserError(
            f"{run_dir} is not a run directory (no config.json)",
            hint="pass a directory written by `andrea-diag train` or `cascade`",
        )
    metrics = read_metrics(run_dir)
    events, failures = read_events(run_dir)
    samples = read_jsonl(run_dir / "samples.jsonl")
    config = _opt_json(run_dir, "config.json", CONFIG)
    # a summary copied from a sibling arm or edited: the table's own figures win, said once
    summary, mismatch = checked_summary(_opt_json(run_dir, "summary.json", SUMMARY), config,
                                        metrics, run_dir / "summary.json")  # fmt: skip
    return {
        "dir": run_dir,
        "config": config,
        "env": _opt_json(run_dir, "env.json", ENV),
        "data": _opt_json(run_dir, "data.json", None),
        "summary": summary,
        "summary_mismatch": mismatch,
        "schedule": _opt_json(run_dir, "schedule.json", {}),
        "metrics": metrics,
        "events": events.reset_index(drop=True),
        "probe_failures": failures,
        "samples": clean_table(samples, "samples", run_dir / "samples.jsonl"),
    }


def read_cascade_meta(cascade_dir: Path) -> dict[str, Any]:
    """cascade.json, or a one-line UserError when it is absent, corrupt or lists no arms.
    Every arm is a plain name that stays inside ``cascade_dir`` (rundir.child)."""
    meta_path = cascade_dir / "cascade.json"
    if not (meta_path.exists() or meta_path.is_symlink()):
        raise UserError(
            f"{cascade_dir} is not a cascade or train run directory (no cascade.json)",
            hint="pass the --out directory of `andrea-diag cascade` or `train`",
        )
    meta = clean(read_json(meta_path, "cascade.json", kind=dict), CASCADE, str(meta_path))
    if not meta.get("arms"):
        raise UserError(f"{meta_path} lists no arms")
    if len(meta["arms"]) > MAX_ARMS:  # each is looked up and named on the page: 100,000 took 15 s
        raise UserError(f"{meta_path} lists {len(meta['arms']):,} arms, more than a cascade "
                        f"runs ({MAX_ARMS:,})", hint=DAMAGED)  # fmt: skip
    for arm in meta["arms"]:
        if not isinstance(arm, str):
            raise UserError(f"{meta_path} lists an arm that is not a name: {arm!r}"[:200])
        child(cascade_dir, arm, f"{meta_path.name}: arm")
    return meta
