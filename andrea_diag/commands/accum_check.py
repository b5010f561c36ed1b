"""``andrea-diag accum-check``: the toolkit's accumulation loop and the classic mistakes,
each measured against a full-batch gradient (document 002's checklist).

    andrea-diag accum-check                                   # tiny, m=4, A=4, D=1, fp32, CPU
    andrea-diag accum-check --replicas 2 --precision bf16     # simulated DP replicas, autocast
    andrea-diag accum-check --size 12m --micro-batch 2 --accum 8 --out runs/accum

Writes ``<out>/accum-check.json`` and ``<out>/accum-check.html``; ``<out>`` defaults to
``runs/accum-check-<size>-<time>``. Exits 1 (one line) when the toolkit's own loop is outside
its tolerance. The measurements: andrea_diag/experiments/accum_check.py.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from andrea_diag.commands.options import check_out_path
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.console_text import make_console
from andrea_diag.errors import UserError
from andrea_diag.fields import MAX_SEED
from andrea_diag.rundir import atomic_write_text
from andrea_diag.train.components import PRECISIONS  # the --precision registry (torch only)

if TYPE_CHECKING:
    from andrea_diag.experiments.accum_check import AccumCheckResult

SizeOpt = Annotated[str, typer.Option("--size", help=f"Model preset: {', '.join(MODEL_PRESETS)}")]
MicroOpt = Annotated[
    int, typer.Option("--micro-batch", help="m: sequences per microbatch", max=2**20)
]
AccumOpt = Annotated[
    int, typer.Option("--accum", help="A: microbatches per group (>= 2)", max=2**20)
]
ReplicasOpt = Annotated[
    int,
    typer.Option(
        "--replicas", help="D: data-parallel replicas, simulated in one process", max=1024
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        "--precision",
        help=f"{', '.join(PRECISIONS)}: the trainer's precision components (fp16: its "
        "GradScaler, undone before comparing)",
    ),
]
SeqOpt = Annotated[
    int, typer.Option("--seq-len", help="Tokens per sequence (before padding)", max=2**20)
]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Initial weights and random batch", min=0, max=MAX_SEED)
]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, auto, cuda or cuda:N")]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        # parentheses, not [default: ...]: rich would take the brackets for markup and drop them
        help="Folder for accum-check.json / .html (default: runs/accum-check-<size>-<time>)",
    ),
]


def accum_check(
    size: SizeOpt = "tiny",
    micro_batch: MicroOpt = 4,
    accum: AccumOpt = 4,
    replicas: ReplicasOpt = 1,
    precision: PrecisionOpt = "fp32",
    seq_len: SeqOpt = 32,
    seed: SeedOpt = 0,
    device: DeviceOpt = "cpu",
    out: OutOpt = None,
) -> None:
    """Measure accumulated gradients against a full batch: the toolkit's loop and each mistake."""
    # imported here: `andrea-diag --help` should not pay for torch and the model
    from andrea_diag.bench.train_checks import check_out_outside_runs, out_dir_for_work
    from andrea_diag.experiments.accum_check import AccumSpec, run_accum_check

    spec = AccumSpec(size, micro_batch, accum, replicas, precision, seq_len, seed, device)
    spec.validate()  # bad options fail before the output folder is made
    check_out_path(out, "--out")  # a control character or a dangling link, too
    check_out_outside_runs(out)
    console = make_console()
    if out is None:
        from andrea_diag.experiments.cascade import default_out

        out = default_out("accum-check", size)
    # a file in its place is refused before the measurement, not after; gone again if the
    # measurement stops (Ctrl-C, out of memory) before anything was written
    with out_dir_for_work(out):
        console.print(
            f"[dim]measuring {size}: m={micro_batch} A={accum} D={replicas} {precision}[/]"
        )
        result = run_accum_check(spec)
        command = (
            f"andrea-diag accum-check --size {size} --micro-batch {micro_batch} --accum {accum} "
            f"--replicas {replicas} --precision {precision} --seq-len {seq_len} --seed {seed} "
            f"--device {device} --out {shlex.quote(str(out))}"
        )
        result.meta["command"] = command
        text = json.dumps(asdict(result), indent=2, ensure_ascii=False)
        # a planted link is replaced, not followed
        atomic_write_text(out / "accum-check.json", text)
    from andrea_diag.report.accum_page import render_accum_page

    atomic_write_text(out / "accum-check.html", render_accum_page(result, command))
    console.print(table(result))
    missed = [r.method for r in result.rows if r.kind == "mistake" and not r.passed]
    if missed:
        console.print(f"[yellow]not detected at this setup: {', '.join(missed)}[/]", soft_wrap=True)
    console.print(
        f"wrote {out / 'accum-check.json'} and {out / 'accum-check.html'}", soft_wrap=True
    )
    if not result.ok:
        bad = next(r for r in result.rows if r.kind == "toolkit" and not r.passed)
        raise UserError(
            f"the toolkit's accumulation loop is off: {bad.method} has relative error "
            f"{bad.rel_err:.2e}, tolerance {bad.criterion.split()[-1]}",
            exit_code=1,
        )


def table(result: AccumCheckResult) -> Table:
    """The console summary: one line per measured loop."""
    meta = result.meta
    t = Table(
        title=f"accum-check {meta['size']} m={meta['micro_batch']} A={meta['accum']} "
        f"D={meta['replicas']} {meta['precision']} on {meta['device']} "
        f"({meta['tokens_global']} supervised tokens)"
    )
    for col in ("method", "rel. error", "expected", "criterion", "result"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in result.rows:
        if r.passed is None:  # the floor row: context, no verdict
            verdict = ""
        elif r.kind == "toolkit":
            verdict = "[green]PASS[/]" if r.passed else "[bold red]FAIL[/]"
        else:  # a mistake passes when its error is clearly non-zero: the check sees it
            verdict = "[green]detected[/]" if r.passed else "[bold red]missed[/]"
        expected = "" if r.expected is None else f"{r.expected:.4g}"
        t.add_row(r.method, f"{r.rel_err:.3e}", expected, r.criterion, verdict)
    return t
