"""The accum-check page: document 002's accumulation checklist, measured, as one HTML table.

    from andrea_diag.report.accum_page import render_accum_page
    Path("accum-check.html").write_text(render_accum_page(run_accum_check(AccumSpec())))

Written by ``andrea-diag accum-check`` next to ``accum-check.json``. Plain HTML (no plotly, no
script): a setup table, the results table and how each number was measured.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from andrea_diag.experiments.accum_check import AccumCheckResult, CheckRow
from andrea_diag.report.safe import esc

try:  # the project's look when the report stack (plotly) is installed; a bare image still works
    from andrea_diag.report.html import CSS
except ImportError:  # html.py imports plotly at module level
    CSS = """
body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:0.9em} td,th{border:1px solid #ddd;padding:4px 8px}
th{background:#f5f5f5;text-align:left} .num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#777;font-style:italic}
"""
PAGE_CSS = ".pass{color:#1a7f37;font-weight:bold} .fail{color:#b00;font-weight:bold} .nw{white-space:nowrap}"

WHAT = {  # what each row's loop does, by method name (experiments/accum_loops.py)
    "toolkit loop": "the trainer's accumulate_with per replica (its Precision and a Reducer "
    "by DDPReducer's rules: global tokens, loss × D), replicas' gradients averaged as DDP does",
    "toolkit loop, partial group": "iterate_groups(use-real-denominator) on a dataset "
    "that is not a multiple of m×A: the short last group over its own tokens",
    "full batch vs fp64": "the precision's own floor: its full batch against an fp64 full "
    "batch (context, no verdict)",
    "mean of microbatch means": "each microbatch's token mean, averaged over A (and D): padding "
    "gives short microbatches the weight of full ones",
    "double division (÷A twice)": "the loss is already over the group's tokens, then divided "
    "by A again: the gradient shrinks by A",
    "zero grads every microbatch": "zero_grad inside the microbatch loop: only each replica's "
    "last microbatch survives",
    "no zeroing between groups": "two consecutive groups without zero_grad: the previous "
    "group's gradient is added to this one's",
    "replica-local denominator": "each replica divides by its own tokens, replicas averaged "
    "(DDP's mean): a replica with fewer tokens weighs more",
    "partial group ÷ full group": "the short last group divided by A microbatches' worth "
    "of tokens though fewer came (against its own full batch)",
    "scheduler per microbatch": "lr reached after one update against the per-update "
    "linear warmup: A warmup steps taken instead of one",
}


def _halved(meta: dict[str, Any]) -> str:
    """ ", 2048 after overflows" when the GradScaler halved its scale during the check."""
    end = meta.get("loss_scale_end", meta["loss_scale"])
    return f", {end:g} after overflows" if end != meta["loss_scale"] else ""


def _verdict(row: CheckRow) -> str:
    if row.passed is None:
        return '<span class="note">context</span>'
    if row.kind == "toolkit":
        return '<span class="pass">PASS</span>' if row.passed else '<span class="fail">FAIL</span>'
    # a mistake "passes" when the check sees it: its error is clearly non-zero
    if row.passed:
        return '<span class="pass">detected</span>'
    return '<span class="fail">missed</span>'


def _results(result: AccumCheckResult) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("method", "kind", "‖g − g_full‖ / ‖g_full‖", "expected", "criterion", "result")
    )
    body = []
    for r in result.rows:
        expected = "" if r.expected is None else f"{r.expected:.4g}"
        body.append(
            f"<tr><td><b>{esc(r.method)}</b><br><span class='note'>"
            f"{esc(WHAT.get(r.method, ''))}</span></td><td>{esc(r.kind)}</td>"
            f"<td class='num'>{r.rel_err:.3e}</td><td class='num'>{expected}</td>"
            f"<td class='nw'>{esc(r.criterion)}</td><td>{_verdict(r)}</td></tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _setup(meta: dict[str, Any]) -> str:
    m, a, d = meta["micro_batch"], meta["accum"], meta["replicas"]
    tokens = "; ".join(
        f"replica {i}: {', '.join(map(str, mbs))}"
        for i, mbs in enumerate(meta["tokens_per_microbatch"])
    )
    lr = meta["lr_after_one_update"]
    rows = [
        ("model", f"{meta['size']} on {meta['device']} (torch {meta['torch']})"),
        ("batch", f"m={m} × A={a} × D={d} = {m * a * d} sequences of {meta['seq_len']} tokens"),
        ("supervised tokens", f"{meta['tokens_global']} in all; per microbatch: {tokens}"),
        (
            "precision",
            f"{meta['precision']}: {meta.get('precision_component', '')} "
            f"(loss scale {meta['loss_scale']:g}{_halved(meta)}, undone)",
        ),
        ("replicas", f"D={d}: {meta.get('reducer', '')}"),
        (
            "tolerance",
            f"{meta['tolerance']:.2e} = max({meta['tolerance_base']:.2e}, "
            f"{meta['floor_factor']:g} × floor {meta['floor']:.2e})",
        ),
        ("mistake detected at", f"relative error ≥ {meta['detect']:g}"),
        ("lr after one update", f"{lr['actual']:.3g} reached vs {lr['intended']:.3g} intended"),
        ("seed", str(meta["seed"])),
    ]
    return (
        "<table>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


METHOD = """<ul>
<li><b>Reference</b>: one forward/backward over all m×A×D sequences, loss = summed token
losses / supervised tokens (targets = IGNORE excluded). Each row's number is
‖g_method − g_full‖ / ‖g_full‖ over all parameters, norms in float64.</li>
<li><b>Padding</b>: supervised lengths are random in 1..seq_len, sorted longest first (a
length-bucketing loader's order), the first sequence full and the last one token long, so the
microbatches' and replicas' token counts differ.</li>
<li><b>Precision</b>: the trainer's own component for --precision (train/components.py):
its autocast and backward; fp16's GradScaler scales the loss, and its unscale_ undoes the scale
before any comparison, as it does before the trainer's clipper.</li>
<li><b>Replicas</b> are simulated in one process, through a Reducer that keeps DDPReducer's
rules: replica r takes its own m×A slice, every replica sees the same weights, the denominator
is the global token count (all-reduced before the first microbatch), each loss is multiplied by
D at backward, and the replicas' gradients are averaged, as DDP's all-reduce does. The toolkit
row runs the trainer's own accumulate_with; every mistake row is reduced the same way.</li>
<li><b>Tolerance</b>: fp32 1e-6; bf16 and fp16 4 units of the format's roundoff (2^-8, 2^-11),
against the full batch in the same precision. The floor row is that full batch against an fp64
one; where twice the floor exceeds the base tolerance (large models, many tokens), twice the
floor is used, since two computations that far from the exact gradient may differ by that.</li>
<li><b>Scheduler</b>: one real update with the scheduler stepped after every microbatch, a
linear warmup over the v2 recipe's updates; the row is |lr reached / lr intended − 1| after one
update, intended being the per-update schedule's lr for update 2.</li>
<li><b>No zeroing</b>: a second random group of the same shape runs first, without zero_grad in
between; <b>partial last group</b>: a dataset of A + A//2 microbatches, the last group measured
against its own full batch.</li>
</ul>"""


def render_accum_page(result: AccumCheckResult, command: str = "") -> str:
    """The whole page for one accum-check run."""
    meta = result.meta
    title = (
        f"accum-check: {meta['size']}, m={meta['micro_batch']}, A={meta['accum']}, "
        f"D={meta['replicas']}, {meta['precision']}"
    )
    verdict = (
        '<span class="pass">the toolkit loop is within its tolerance</span>'
        if result.ok
        else '<span class="fail">the toolkit loop is OUTSIDE its tolerance</span>'
    )
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = f"<p class='note'>{esc(command)}</p>" if command else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{CSS}{PAGE_CSS}</style></head><body><h1>{esc(title)}</h1>"
        f"<p>{verdict}. Generated {when}.</p>{cmd}"
        f"<h2>Gradient accumulation against the full batch</h2>{_results(result)}"
        f"<h2>Setup</h2>{_setup(meta)}<h2>How it is measured</h2>{METHOD}</body></html>\n"
    )
