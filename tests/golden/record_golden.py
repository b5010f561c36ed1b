"""Re-record ``cascade_tiny_metrics.json``, the pin of ``test_golden_cascade``.

    python tests/golden/record_golden.py

Only when a change is *meant* to alter training numbers: the file proves that refactors of the
trainer leave every metric bit-identical on CPU. Say in the commit why it was re-recorded.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "cascade_tiny_metrics.json"
# a few dozen updates crossing bandit boundaries, every clip mode, both injected spike causes
ARGS = {
    "steps": 40,
    "lr": 3e-3,
    "seed": 0,
    "clips": ["none", "global", "per-tensor"],
    "inject": ["outlier@25", "nonfinite@32"],
}
# The built-in repo-docs source reads the installed packages' READMEs and stdlib docstrings,
# which differ between machines and under pytest: a committed copy keeps the tokens fixed.
REPO_DOCS = HERE / "repo-docs.md"
SKIP_COLUMNS = {"time_s", "clip_ms"}  # wall clock (record.WALL_CLOCK_COLUMNS), never reproducible


def run_golden_cascade(out: Path) -> dict[str, dict[str, list]]:
    """Run the pinned tiny cascade into ``out``; return {arm: {column: values}}."""
    from rich.console import Console

    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
    from andrea_diag.record import read_jsonl

    base = RunConfig(
        size="tiny", steps=ARGS["steps"], lr=ARGS["lr"], seed=ARGS["seed"], inject=ARGS["inject"],
        device="cpu",
        sources={"gutenberg": "generated", "hermes3-general": "generated", "repo-docs": str(REPO_DOCS)},
    )  # fmt: skip
    spec = CascadeSpec(base=base, clips=list(ARGS["clips"]), out=out)
    run_cascade(spec, Console(stderr=True, quiet=True), render=False)
    result = {}
    for arm in ARGS["clips"]:
        df = read_jsonl(out / arm / "metrics.jsonl")
        result[arm] = {c: df[c].tolist() for c in sorted(df.columns) if c not in SKIP_COLUMNS}
    return result


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        metrics = run_golden_cascade(Path(tmp) / "c")
    GOLDEN.write_text(json.dumps(metrics, allow_nan=True) + "\n")
    print(f"wrote {GOLDEN} ({sum(len(v) for v in metrics.values())} columns)", file=sys.stderr)
