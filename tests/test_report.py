"""The HTML report and its findings, on synthetic run directories (CPU, a few seconds).

python -m pytest -q tests/test_report.py
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.errors import UserError
from andrea_diag.record import load_run
from andrea_diag.report import findings as F
from andrea_diag.report import render_cascade, render_report
from andrea_diag.report.arms import Arm
from andrea_diag.report.figures import loss_figure
from andrea_diag.report.style import BOUNDARY_SHAPE, MAX_POINTS, PHASE_SHADE, thin

N = 120


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, make_run: Callable[..., Path]
) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("pair")
    runs = [
        make_run(d / "none", clip="none", n_updates=N),
        make_run(d / "global", clip="global", n_updates=N),
    ]
    out = render_report(runs, d / "report.html", notes=["a <note>"])
    return d, out.read_text()


def _outside_bundle(page: str) -> str:
    return page.replace(get_plotlyjs(), "")


def _figures(page: str) -> list[dict]:
    """The figure JSON passed to each Plotly.newPlot call (data + layout)."""
    figs = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = json.JSONDecoder().raw_decode(page, m.end())
        rest = page[end:].lstrip().lstrip(",").lstrip()
        layout, _ = json.JSONDecoder().raw_decode(rest)
        figs.append({"id": m.group(1), "data": data, "layout": layout})
    return figs


def test_plotly_inlined_once_and_no_network(pair: tuple[Path, str]) -> None:
    _, page = pair
    assert page.count(get_plotlyjs()) == 1
    rest = _outside_bundle(page)
    assert "cdn.plot.ly" not in rest
    assert not re.search(r"<script[^>]+src=", rest)
    assert "mathjax" not in rest.lower()
    assert not re.search(r"<link[^>]+href=['\"]?http", rest)


def test_every_boundary_marked(
    pair: tuple[Path, str], boundary_updates: Callable[[int], list[int]]
) -> None:
    _, page = pair
    figs = {f["id"]: f for f in _figures(page)}
    loss = figs["fig-training-loss"]
    xs = sorted(s["x0"] + 0.5 for s in loss["layout"]["shapes"] if s.get("name") == BOUNDARY_SHAPE)
    assert xs == boundary_updates(N)
    grad = figs["fig-gradient-norm"]
    assert sum(s.get("name") == BOUNDARY_SHAPE for s in grad["layout"]["shapes"]) == len(
        boundary_updates(N)
    )
    assert grad["layout"]["yaxis"]["type"] == "log"
    # every other phase is shaded: bands from boundary 1 to 2, 3 to 4, ... (the last to the end)
    bands = sorted(s["x0"] + 0.5 for s in loss["layout"]["shapes"] if s.get("name") == PHASE_SHADE)
    assert bands == boundary_updates(N)[::2]
    # per-source loss rows: the three sources, not the spike probe's loss_z column
    titles = [a["text"] for a in loss["layout"]["annotations"]]
    assert titles == ["loss (all sources)"] + [f"loss on {s}" for s in SOURCE_NAMES]


def test_all_figures_present_with_probes(pair: tuple[Path, str]) -> None:
    _, page = pair
    meta = json.loads(re.search(r"id='report-meta'>(.*?)</script>", page).group(1))
    # one size only: everything but the capacity-fragility chart
    assert meta["figures"] == 7 == len(_figures(page))
    assert "capacity-fragility view needs two" in page


def test_summary_table_and_header(pair: tuple[Path, str]) -> None:
    _, page = pair
    assert "2.6" in page and "2.7" in page  # final losses of none / global
    assert "20.9" in page  # max grad norm
    assert "not recovered" in page  # recovery_v None
    assert "insufficient-data" in page  # re-judged: the run has no held-out distribution
    assert "max_norm 1" in page
    assert "GENERATED" in page and "gutenberg" in page
    assert "a &lt;note&gt;" in page  # notes escaped


def test_findings_name_spike_updates_and_causes(
    pair: tuple[Path, str], boundary_updates: Callable[[int], list[int]]
) -> None:
    _, page = pair
    b = boundary_updates(N)
    for u, cause in zip(
        b[:3], ["phase-transition+outlier", "numerical", "phase-transition"], strict=True
    ):
        assert f"update {u + 1} (grad_norm, cause: {cause})" in page
    assert "no arm locked in." in page
    assert "did not collapse" in page
    assert "clipping cost 0.100 nats" in page


def test_samples_escaped(pair: tuple[Path, str]) -> None:
    _, page = pair
    assert "&lt;b&gt;sample&lt;/b&gt; &amp; gutenberg greedy" in page
    assert "<b>sample</b>" not in page


def test_missing_probe_columns_still_renders(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    run = make_run(tmp_path / "bare", probes=False)
    (run / "samples.jsonl").unlink()
    out = render_report([run], tmp_path / "r.html")
    page = out.read_text()
    assert "heatmap omitted" in page
    assert "optimizer-state probe columns" in page
    assert "no samples recorded" in page
    assert len(_figures(page)) == 4  # loss, grad norm, clip coef, weights


def test_mixed_sizes_capacity_view(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    runs = [
        make_run(tmp_path / s / c, size=s, clip=c, n_updates=60)
        for s in ("tiny", "12m")
        for c in ("none", "global")
    ]
    page = render_report(runs, tmp_path / "r.html").read_text()
    assert "Capacity-fragility: the same arms" in page
    assert "tiny/none" in page and "12m/global" in page


def test_not_a_run_dir_is_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        render_report([tmp_path], tmp_path / "r.html")
    with pytest.raises(UserError):
        render_report([tmp_path / "absent"], tmp_path / "r.html")
    with pytest.raises(UserError):
        render_report([], tmp_path / "r.html")
    with pytest.raises(UserError):
        render_cascade(tmp_path)


def test_render_cascade(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    for arm in ("none", "global"):
        make_run(tmp_path / arm, clip=arm, n_updates=40)
    (tmp_path / "cascade.json").write_text(
        json.dumps(
            {
                "arms": ["none", "global"],
                "size": "tiny",
                "seed": 0,
                "command": "andrea-diag cascade --size tiny",
            }
        )
    )
    out = render_cascade(tmp_path)
    assert out == tmp_path / "report.html"
    page = out.read_text()
    assert "cascade: size tiny" in page and "andrea-diag cascade --size tiny" in page


def test_long_series_downsampled(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    run = make_run(tmp_path / "long", n_updates=5000, probes=False)
    arm = Arm.from_run(load_run(run))
    fig, _ = loss_figure([arm])
    n = max(len(t.x) for t in fig.data)
    assert n <= MAX_POINTS + 50
    # boundary and spike rows survive thinning
    kept = set(thin(arm.metrics, {4999})["update"])
    assert 4999 in kept and 5000 in kept


# ---- findings unit tests (plain tables, no files) ----


def _arm(label: str = "none", clip: str = "none", **kw) -> Arm:
    return Arm(
        label=label,
        arm=clip,
        size=kw.pop("size", "12m"),
        config={
            "clip": clip,
            "lr": 3e-4,
            "seed": 0,
            "steps": 10,
            "recipe": "v1",
            **kw.pop("config", {}),
        },
        summary=kw.pop("summary", {}),
        metrics=kw.pop("metrics", pd.DataFrame()),
        events=kw.pop("events", pd.DataFrame()),
        samples=pd.DataFrame(),
    )


def _metrics(losses: list[float], bounds: set[int]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "update": range(1, len(losses) + 1),
            "loss": losses,
            "boundary": [u in bounds for u in range(1, len(losses) + 1)],
        }
    )


def test_boundary_loss_delta() -> None:
    m = _metrics([1, 1, 1, 2, 2, 2, 1, 1, 1, 1], {4})
    delta, n = F.boundary_loss_delta(m, k=3)
    assert n == 1 and delta == pytest.approx(1.0)
    text = F.boundary_loss_finding(_arm(metrics=m))
    assert "+1.000 over 1 boundaries" in text
    assert "not measured" in F.boundary_loss_finding(_arm(metrics=_metrics([1, 2], {2})))


def test_spike_list_and_limit() -> None:
    ev = pd.DataFrame({"update": range(20, 0, -1), "metric": "grad_norm", "cause": "numerical"})
    text = F.spike_list(_arm(events=ev), limit=10)
    assert text.startswith("none: 20 spikes: update 1 (grad_norm, cause: numerical)")
    assert "update 10 (" in text and "update 11 (" not in text and "and 10 more" in text
    ev2 = pd.DataFrame(
        {"update": [5], "metric": ["loss"], "causes": [["outlier", "phase-transition"]]}
    )
    assert "update 5 (loss, cause: outlier+phase-transition)" in F.spike_list(_arm(events=ev2))
    assert "no spikes detected" in F.spike_list(_arm())


def test_spike_boundary_finding() -> None:
    m = _metrics([1.0] * 30, {10, 20})
    ev = pd.DataFrame({"update": [10, 13, 14, 25], "metric": ["grad_norm"] * 3 + ["loss"]})
    text = F.spike_boundary_finding(_arm(metrics=m, events=ev))
    assert "3 grad-norm spikes, 2 within 3 updates after a phase boundary" in text
    assert "1 loss spikes, 0 within" in text


def test_pollution_and_expectations() -> None:
    s = {"pollution": {"max_m_share": 0.2, "max_v_share": 0.6, "recovery_m": 5, "recovery_v": 180}}
    assert (
        "v pollution peaked at a share of 0.6 and recovered after 180 updates"
        in F.pollution_finding(_arm(summary=s))
    )
    assert "not known (the run did not finish)" in F.pollution_finding(_arm())
    assert "no optimizer-state pollution measured" in F.pollution_finding(
        _arm(summary={"final_loss": 3.0})
    )
    shadow = {"pollution": {"shadow": True, "max_m_share": 0.9, "shadow_bytes": 3 * 2**20}}
    assert "(shadow buffers: 3.0 MiB)" in F.pollution_finding(_arm(summary=shadow))
    per_spike = {"pollution": {"shadow": False, "max_m_share": 0.9, "recovery_m": 41}}
    assert "recovered after 41 updates (per spike; shadow buffers off)" in F.pollution_finding(
        _arm(summary=per_spike)
    )
    locked = _arm(
        "none", summary={"final_loss": 3.0, "min_loss": 2.9, "lockin": {"verdict": "locked-in"}}
    )
    fine = _arm(
        "global",
        clip="global",
        summary={"final_loss": 3.0, "min_loss": 2.9, "lockin": {"verdict": "never-learned"}},
    )
    fine.summary["lockin"]["reason"] = "loss stayed near ln V"
    out = F.expectation_findings([locked, fine])
    assert "global: verdict: never-learned (loss stayed near ln V)." in out
    assert (
        "locked in: none." in out and "the unclipped arm none collapsed (lock-in verdict)." in out
    )
    diverged = pd.DataFrame({"update": range(1, 61), "loss": [2.0] * 30 + [5.0] * 30})
    out = F.expectation_findings(
        [_arm(summary={"final_loss": 5.0, "min_loss": 2.0}, metrics=diverged), fine]
    )
    assert "no arm locked in." in out
    assert any(
        x.startswith("the unclipped arm none collapsed (smoothed loss ended at 5") for x in out
    )
    out = F.expectation_findings(
        [_arm(summary={"final_loss": 2.1, "min_loss": 2.0, "nonfinite_updates": 2})]
    )
    assert (
        any("did not collapse" in x for x in out) and "non-finite updates (skipped): none 2." in out
    )


def test_clip_cost() -> None:
    u = _arm("none", summary={"final_loss": 2.5})
    c = _arm("global", clip="global", summary={"final_loss": 4.0})
    (text,) = F.clip_cost_findings([u, c])
    assert "+1.500 (clipping cost 1.500 nats)" in text
    other_lr = _arm("global", clip="global", summary={"final_loss": 4.0}, config={"lr": 1e-2})
    assert "not measured" in F.clip_cost_findings([u, other_lr])[0]


def test_data_finding() -> None:
    a = _arm()
    a.data = {"sources": {"x": {"generated": True}, "y": {"generated": False}}}
    assert F.data_finding([a]) == "GENERATED (synthetic) sources: x; real-text sources: y."
    assert "unknown" in F.data_finding([_arm()])


def test_crashed_run_with_nonfinite_values_renders(tmp_path: Path) -> None:
    """No summary.json, no parquet (Recorder never closed), NaN loss and an inf grad norm."""
    from andrea_diag.config import RunConfig
    from andrea_diag.record import Recorder

    rec = Recorder(tmp_path / "crash", RunConfig(size="tiny").resolve().to_dict())
    for u in range(1, 30):
        rec.log(
            {
                "update": u,
                "loss": math.nan if u > 20 else 3.0,
                "grad_norm": math.inf if u == 20 else 1.0,
                "nonfinite": u >= 20,
                "boundary": u in (8, 15),
                "clip_coef": 1.0,
                "injected": "nonfinite" if u == 20 else None,
            }
        )
    rec.event(
        {
            "update": 20,
            "metric": "grad_norm",
            "value": math.inf,
            "causes": ["numerical"],
            "cause": "numerical",
        }
    )
    page = render_report([tmp_path / "crash"], tmp_path / "r.html").read_text()
    assert "update 20 (grad_norm, cause: numerical)" in page
    assert "injected nonfinite at update 20 (detected as a spike)" in page
    assert "collapsed (final loss is not finite)" in page
    assert "the run did not finish" in page
    assert "non-finite updates (skipped): none 10." in page


def test_lockin_chart_falls_back_to_metric_columns(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    from andrea_diag.report.probe_figures import lockin_figure

    run = make_run(tmp_path / "r", n_updates=40)
    arm = Arm.from_run(load_run(run))
    arm.samples = pd.DataFrame()
    assert lockin_figure([arm])[0] is None
    arm.metrics["lockin/top_token_share"] = [
        0.5 if u % 10 == 0 else None for u in arm.metrics["update"]
    ]
    fig, _ = lockin_figure([arm])
    assert list(fig.data[0].x) == [10, 20, 30, 40]


def test_boundary_loss_delta_skips_windows_with_a_skipped_nonfinite_update() -> None:
    loss = [5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 5.0, 5.0, 5.0, math.inf, 5.0, 5.0, 5.0, 5.0]
    df = pd.DataFrame(
        {"update": range(1, 15), "loss": loss, "boundary": [u in (4, 11) for u in range(1, 15)]}
    )
    delta, n = F.boundary_loss_delta(df, k=3)
    assert n == 1 and delta == pytest.approx(1.0)  # only the boundary at 4 has finite windows


def test_collapse_uses_smoothed_losses_so_an_easy_batch_is_not_a_level() -> None:
    """Sources differ by nats: one easy batch at 0.5 must not make a steady 2.0 a collapse."""
    n = 100
    steady = [2.0 + (0.3 if u % 2 else -0.3) for u in range(n)]
    steady[50] = 0.5  # a single easy-source batch
    arm = _arm(summary={"final_loss": 2.0, "min_loss": 0.5})
    arm.metrics = pd.DataFrame({"update": range(1, n + 1), "loss": steady})
    assert F.collapse_reason(arm) is None
    diverged = [2.0] * 60 + [4.0] * 40
    arm.metrics = pd.DataFrame({"update": range(1, n + 1), "loss": diverged})
    arm.summary["final_loss"] = 4.0
    assert "smoothed loss ended at 4" in (F.collapse_reason(arm) or "")


def test_collapse_is_judged_per_source_so_a_hard_phase_is_not_a_collapse() -> None:
    """The total loss rises when the mix moves to a hard source; each source's own did not."""
    n = 120
    easy = [1.0] * n
    hard = [4.0] * n
    total = [1.2] * 60 + [3.8] * 60  # phase 2 is mostly the hard source
    arm = _arm(summary={"final_loss": 3.8})
    arm.metrics = pd.DataFrame(
        {"update": range(1, n + 1), "loss": total, "loss_easy": easy, "loss_hard": hard,
         "w_easy": 0.5, "w_hard": 0.5}
    )  # fmt: skip
    assert F.collapse_reason(arm) is None
    arm.metrics["loss_easy"] = [1.0] * 60 + [3.0] * 60
    arm.metrics["loss_hard"] = [4.0] * 60 + [6.0] * 60
    assert "per-source smoothed losses ended 2.00 nats" in (F.collapse_reason(arm) or "")


def test_collapse_reads_only_per_source_losses_not_loss_scale_or_excess() -> None:
    """Issue 23 item 1: an fp16 arm's loss_scale (16384 and falling) and the probe's
    loss_excess are loss_* columns but not sources; a steady run is no collapse for them."""
    n = 120
    arm = _arm(summary={"final_loss": 2.0})
    arm.metrics = pd.DataFrame(
        {"update": range(1, n + 1), "loss": [2.0] * n, "loss_repo-docs": [2.0] * n,
         "w_repo-docs": 1.0, "loss_scale": [256.0] * 60 + [16384.0] * 60,
         "loss_excess": [0.0] * 60 + [5.0] * 60}
    )  # fmt: skip
    assert F.source_loss_columns(arm) == ["loss_repo-docs"]
    assert F.collapse_reason(arm) is None
    arm.metrics["loss_repo-docs"] = [2.0] * 60 + [6.0] * 60
    assert "scale" not in (F.collapse_reason(arm) or "scale")


def test_the_optimizer_state_chart_joins_the_rows_a_scheduled_column_was_taken_on() -> None:
    from andrea_diag.report.probe_figures import optimizer_state_figure

    updates = list(range(1, 6001))  # long enough to be thinned
    m_norm = [float(u) if u % 10 == 0 else float("nan") for u in updates]
    arm = _arm(metrics=pd.DataFrame({"update": updates, "m_norm": m_norm}))
    fig, _ = optimizer_state_figure([arm])
    assert fig is not None
    (trace,) = fig.data
    ys = [y for y in trace.y if y == y]  # not NaN
    assert len(ys) == len(trace.y) > 100  # every point drawn is a taken one, and there are many
    assert all(u % 10 == 0 for u in trace.x)
