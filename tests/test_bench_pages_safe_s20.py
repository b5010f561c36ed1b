"""The bench-kernels and bench-train pages through report/safe.py, as a run report is: a result
read back from a JSON someone else wrote (a published bench-train.json) cannot put markup in
the page or a link in a chart."""

from __future__ import annotations

import re
from typing import Any

from hostile_dirs import XSS, assert_safe, figure_strings

from andrea_diag.bench import BenchResult
from andrea_diag.bench.harness import Row

LINK = '<a href="https://evil.example/p">Click</a>'


def _no_links(page: str) -> None:
    strings = figure_strings(page)
    assert strings  # the figures were found
    assert not [s for s in strings if re.search(r"(?i)<\s*a\b|<[^>]*href", s)]
    assert any("&lt;a href" in s for s in strings)  # the name is still there, as text


def _bench_train_result() -> dict[str, Any]:
    arm = {"ms_per_update": 10.0, "tokens_per_s": 4000.0, "mfu": None}
    meta = {"size": "tiny", "precision": "fp32", "plain_loop": XSS, "gpu": XSS, "cuda_graph": 0}
    probes = [{"probe": LINK, "ms_per_update": 1.0, "share_of_engine": 0.1}]
    return {"meta": meta, "engine": arm, "plain": arm, "engine_over_plain": 1.0,
            "speed_vs_plain": 1.0, "probes": probes}  # fmt: skip


def test_bench_train_page_of_a_hostile_json_is_safe_and_draws_names_as_text() -> None:
    from andrea_diag.report.bench_train_page import render_bench_train_page

    page = render_bench_train_page(_bench_train_result())
    assert_safe(page)
    _no_links(page)


def test_bench_kernels_page_of_a_hostile_result_is_safe_and_draws_names_as_text() -> None:
    from andrea_diag.report.bench_page import render_bench_page

    rows = [Row(size=XSS, dtype="fp32", mode="active", variant=v, ms=1.0, ms_p10=1.0,
                ms_p90=1.0, bytes=1, gbps=1.0, pct_copy=50.0, speedup_vs_torch=2.0)
            for v in (LINK, "cuda_three", "cuda_single")]  # fmt: skip
    meta = {"gpu": XSS, "sizes": [XSS], "dtypes": ["fp32"], "note": XSS}
    page = render_bench_page(BenchResult(meta=meta, rows=rows))
    assert_safe(page)
    _no_links(page)
    assert "bench-kernels: &lt;script&gt;" in page
