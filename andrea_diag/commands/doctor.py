"""``andrea-diag doctor``: what this machine can run -- torch, CUDA, GPU, nvcc, the fused clipper
extension (build + self-check against the reference) and NVML telemetry.

    andrea-diag doctor            # always exits 0 when it could look; says clearly what is missing
    andrea-diag doctor --no-build # skip the (first-time ~1 min) extension build
"""

from __future__ import annotations

import platform
import subprocess
from typing import Annotated

import typer
from rich.table import Table

from andrea_diag.console_text import make_console

BuildOpt = Annotated[
    bool, typer.Option("--build/--no-build", help="Build and self-check the CUDA extension")
]


def _nvcc_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        return next((ln.strip() for ln in out.splitlines() if "release" in ln), out.strip()[:80])
    except Exception as exc:
        return f"unreadable ({exc})"


def self_check() -> tuple[bool, str]:
    """Clip random CUDA gradients with the extension and the reference; compare to float64."""
    import torch

    from andrea_diag.clip import cuda, reference

    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(1,), (555,), (65537,), (97, 1025), (0,)]
    grads = [torch.randn(s, generator=gen, device="cuda") for s in shapes]
    total64, per64, truth = reference.float64_truth(grads, 1.0)
    mine = [g.clone() for g in grads]
    total, per, _, _ = cuda.clip(mine, 1.0)
    errs = (
        reference.rel_err(total, total64),
        reference.rel_err(per, per64),
        reference.rel_err(mine, truth),
    )
    ok = errs[0] < 1e-5 and errs[1] < 1e-5 and errs[2] < 1e-5
    return ok, f"rel err norm {errs[0]:.1e}, per-tensor {errs[1]:.1e}, grads {errs[2]:.1e}"


def doctor(build: BuildOpt = True) -> None:
    """Report torch / CUDA / GPU / nvcc / extension / NVML status (exit 0 on a CPU machine too)."""
    import torch

    from andrea_diag import telemetry
    from andrea_diag.clip import cuda

    console = make_console()
    t = Table(title="andrea-diag doctor", show_header=True)
    t.add_column("check")
    t.add_column("status")
    t.add_column("detail")
    ok, missing = "[green]ok[/]", "[yellow]missing[/]"
    t.add_row("python", ok, platform.python_version())
    t.add_row("torch", ok, f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})")
    has_gpu = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if has_gpu else "no CUDA device visible"
    if has_gpu:
        cap = torch.cuda.get_device_capability(0)
        gpu += f" (sm_{cap[0]}{cap[1]}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs)"
    t.add_row("GPU", ok if has_gpu else missing, gpu)
    nvcc = cuda.nvcc_path()
    t.add_row(
        "nvcc",
        ok if nvcc else missing,
        f"{nvcc}: {_nvcc_version(nvcc)}" if nvcc else "not found (CUDA_HOME / PATH)",
    )
    t.add_row(
        "kernel sources",
        ok if (cuda.kernel_dir() / "clip.cu").is_file() else missing,
        str(cuda.kernel_dir()),
    )
    if not has_gpu:
        t.add_row("CUDA clipper", missing, "needs a GPU; impl='auto' uses the pure-torch reference")
    elif not build:
        t.add_row("CUDA clipper", "[dim]skipped[/]", "--no-build")
    else:
        avail, why = cuda.available()
        t.add_row("CUDA clipper build", ok if avail else "[red]failed[/]", why)
        if avail:
            passed, detail = self_check()
            t.add_row("self-check vs reference", ok if passed else "[red]FAILED[/]", detail)
    snap = telemetry.snapshot()
    t.add_row(
        "NVML telemetry",
        ok if snap else missing,
        ", ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in snap.items())
        if snap
        else "no NVML (no GPU or driver): telemetry is a silent no-op",
    )
    console.print(t)
    if not has_gpu:
        console.print(
            "No GPU here: everything runs on the CPU reference paths; GPU timings need a CUDA machine."
        )
