"""Kernel benchmarks behind ``andrea-diag bench-kernels`` (and the bench/ pytest suite).

    from andrea_diag.bench import run_bench, three_vs_one, adamw_summary
    result = run_bench(sizes=["12m", "120m"], dtypes=["fp32", "bf16"], reps=100, device="cuda")
    print(*three_vs_one(result), *adamw_summary(result), sep="\\n")
    json.dumps(result.to_dict())   # every row plus the run's metadata

Modules, each importing only the ones above it (no cycle):

- :mod:`andrea_diag.bench.harness`: gradient sets, the L2-flushing median timer, rows and
  results, copy bandwidth, CUDA-graph capture, ``find`` / ``fmt``, the check tolerances and
  ``peer_misses`` (torch rows past them: flagged, not raised). The method lives there.
- :mod:`andrea_diag.bench.adamw`: case "clip+adamw", a whole clipped AdamW step three ways.
- :mod:`andrea_diag.bench.adaptive`: case "adaptive", every ``--clip`` mode against ``global``.
- :mod:`andrea_diag.bench.headroom`: extra rows of case "clip" saying where the norm-only
  time goes (one flat tensor; a flush that leaves L2 clean).
- :mod:`andrea_diag.bench.clip`: case "clip", the clipper variants vs torch's
  ``clip_grad_norm_``, and ``run_bench``, which runs every case.

The training-loop benchmark (``andrea-diag bench-train``: the trainer against a plain loop of
the same model) is :mod:`andrea_diag.bench.train`. The HTML page of a kernel run is
:func:`andrea_diag.report.bench_page.render_bench_page`.
"""

from __future__ import annotations

from andrea_diag.bench.adamw import adamw_summary
from andrea_diag.bench.adaptive import adaptive_summary
from andrea_diag.bench.clip import CASES, headroom, run_bench, targets, three_vs_one, verdict
from andrea_diag.bench.harness import DTYPES, BenchResult, Row, find, fmt, peer_misses

__all__ = [
    "CASES",
    "DTYPES",
    "BenchResult",
    "Row",
    "adamw_summary",
    "adaptive_summary",
    "find",
    "fmt",
    "headroom",
    "peer_misses",
    "run_bench",
    "targets",
    "three_vs_one",
    "verdict",
]
