"""Extract a labelled lock-in fixture from a run directory: the verdict's inputs, not the run.

    python3 bench/label_fixture.py RUN_DIR --name 60m-300-v1-lr3e-4-none --label negative \
        --command "andrea-diag train --size 60m ..." [--out tests/fixtures/lockin]

Writes ``<out>/<name>.json`` (a few tens of kB) with what ``tests/test_lockin_fixtures.py``
judges again with the current verdict code (andrea_diag/probes/verdict.py):

- ``label``: ``negative`` (must not be ``locked-in``) or ``positive`` (must be ``locked-in``);
- ``command``: the command that made the run (give it: a run dir does not know its shell);
- ``vocab_size``, ``unigram_entropy`` (from the run's summary), ``size``, ``steps``, ``lr``;
- ``updates``, ``losses``: the training loss per update (NaN/inf as strings); ``nonfinite_updates``;
- ``evals``: per evaluation, ``update``, ``eval_loss`` and every ``eval_loss_*`` /
  ``eval_argmax_share*`` / ``eval_entropy*`` / ``eval_top1_prob*`` column (per source too);
- ``samples``: the greedy sample rows' numbers (update, source, mode, top_token_share,
  distinct_1) and their text, the page's illustration;
- ``recorded_verdict``: what the run's own summary said (for the record, not judged).

The run directory is read as untrusted input: JSON and JSONL only, through andrea_diag.record.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's andrea_diag

EVAL_PREFIXES = ("eval_loss", "eval_argmax_share", "eval_entropy", "eval_top1_prob")
SAMPLE_FIELDS = ("update", "source", "mode", "top_token_share", "distinct_1", "text")


def _num(v: Any) -> float | str | None:
    """A JSON-safe number: None when missing; NaN and inf as the strings "nan", "inf", "-inf"
    (JSON has neither, and a non-finite loss is evidence: ``float()`` reads them back)."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else str(f)


def extract(run_dir: Path) -> dict[str, Any]:
    """The fixture's content from one run directory (a train run, or one arm of a cascade)."""
    from andrea_diag.probes.lockin import record_inputs
    from andrea_diag.record import load_run

    run = load_run(run_dir)
    m, samples = run["metrics"], run.get("samples")
    config, summary = run.get("config") or {}, run.get("summary") or {}
    lock = summary.get("lockin") or {}
    ev = m[m["eval_loss"].notna()] if "eval_loss" in m else m.iloc[:0]
    cols = ["update"] + [c for c in ev.columns if c.startswith(EVAL_PREFIXES)]
    greedy = []
    if samples is not None and not samples.empty:
        for row in samples.to_dict("records"):
            if row.get("mode") == "greedy":
                greedy.append({k: row.get(k) for k in SAMPLE_FIELDS})
    return {
        "size": config.get("size"),
        "steps": config.get("steps"),
        "lr": config.get("lr"),
        "clip": config.get("clip"),
        "vocab_size": (config.get("model_config") or {}).get("vocab_size"),
        "unigram_entropy": lock.get("unigram_entropy"),
        "updates": [int(u) for u in m["update"]],
        "losses": [_num(v) for v in m["loss"]],
        "nonfinite_updates": record_inputs(m)["nonfinite_updates"],
        "evals": {c: [int(v) if c == "update" else _num(v) for v in ev[c]] for c in cols},
        "samples": greedy,
        "recorded_verdict": {k: lock.get(k) for k in ("verdict", "reasons")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a run directory (with metrics.jsonl)")
    ap.add_argument("--name", required=True, help="fixture name, e.g. tiny-300-lr3e-3-none")
    ap.add_argument("--label", required=True, choices=("negative", "positive"))
    ap.add_argument("--command", required=True, help="the command that made the run")
    ap.add_argument("--note", default="", help="why the label is right")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/lockin"))
    args = ap.parse_args(argv)
    if not (args.run_dir / "metrics.jsonl").is_file():
        print(f"error: {args.run_dir} has no metrics.jsonl (give one arm's run dir)")
        return 2
    fixture = {"name": args.name, "label": args.label, "command": args.command,
               "note": args.note, **extract(args.run_dir)}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.json"
    path.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes, {len(fixture['evals']['update'])} evals)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
