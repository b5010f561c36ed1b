"""The bench-kernels page says which torch rows missed their float64 check.

Since round 31 a peer (torch) row past its tolerance is timed and flagged (``within_tol``
False) instead of stopping the run; the JSON and the console said so, the page did not: a
reader of the page saw its time beside ours with nothing to tell them its result was off.
"""

from __future__ import annotations

from andrea_diag.bench import BenchResult, Row
from andrea_diag.report.bench_page import _table_figure, render_bench_page


def _row(variant: str, within: bool | None) -> Row:
    return Row(size="12m", dtype="fp32", mode="active", variant=variant, ms=1.0, ms_p10=1.0,
               ms_p90=1.0, bytes=1, gbps=1.0, pct_copy=50.0, speedup_vs_torch=1.0,
               rel_err_norm=3e-4, rel_err_grads=2e-4, rel_err_params=1.1e-5,
               within_tol=within)  # fmt: skip


def _table_column(result: BenchResult, header: str) -> list:
    """The page's table figure's column under ``header``."""
    table = _table_figure(result).data[0]
    return list(table.cells.values[list(table.header.values).index(header)])


def test_a_peer_row_past_its_check_is_named_on_the_page_and_marked_in_the_table() -> None:
    rows = [_row("torch_foreach", False), _row("cuda_three", True), _row("copy", None)]
    result = BenchResult(meta={"sizes": ["12m"], "dtypes": ["fp32"]}, rows=rows)
    page = render_bench_page(result)
    assert "Peers outside their float64 check" in page
    assert "torch_foreach (12m fp32 active) is outside its tolerance" in page
    column = _table_column(result, "float64 check")
    assert column == ["MISSED (torch's rounding)", "passed", "-"]
    assert _table_column(result, "rel err params") == ["1.1e-05"] * 3


def test_a_run_whose_rows_all_passed_has_no_peer_section() -> None:
    rows = [_row("torch_foreach", True), _row("cuda_three", True)]
    page = render_bench_page(BenchResult(meta={"sizes": ["12m"], "dtypes": ["fp32"]}, rows=rows))
    assert "Peers outside their float64 check" not in page


def test_a_target_whose_set_was_not_run_reads_not_measured_not_missed() -> None:
    """A ``--sizes 12m`` run printed MISSED for every 120m target it never measured."""
    from andrea_diag.bench import targets, verdict

    rows = [_row("cuda_three", True)]  # 12m fp32 active only, speed-up 1.0
    result = BenchResult(meta={"gpu": "a GPU", "sizes": ["12m"], "dtypes": ["fp32"]}, rows=rows)
    words = {what: verdict(got, met) for what, got, _, met in targets(result)}
    assert words["120m fp32 active speed-up"] == "not measured"
    assert words["12m fp32 active speed-up"] == "missed"  # measured: 1.0 against 5.0
    assert words["12m fp32 active % copy BW (graphed)"] == "missed"  # 50% against 75%
    page = render_bench_page(result)
    assert "120m fp32 active speed-up: - (want &ge; 2.5) not measured" in page
