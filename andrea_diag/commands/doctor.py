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
from rich.markup import escape
from rich.table import Table

from andrea_diag.console_text import make_console
from andrea_diag.errors import visible

BuildOpt = Annotated[
    bool, typer.Option("--build/--no-build", help="Build and self-check the CUDA extension")
]


def nvcc_status(path: str) -> tuple[bool, str]:
    """(works, what ``nvcc --version`` said): its release line, or why it does not work. An
    nvcc that timed out or exited non-zero was reported "ok" with an "unreadable" detail."""
    try:
        res = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             errors="replace")  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"does not run ({visible(str(exc))[:120]})"
    release = next((ln.strip() for ln in res.stdout.splitlines() if "release" in ln), None)
    if res.returncode != 0 or release is None:
        said = (res.stderr or res.stdout).strip().splitlines()
        return False, f"--version exited {res.returncode}" + (
            f": {visible(said[0])[:120]}" if said else ", saying no release"
        )
    return True, visible(release)


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
    works, said = nvcc_status(nvcc) if nvcc else (False, "not found (CUDA_HOME / PATH)")
    status = ok if works else ("[red]fails[/]" if nvcc else missing)
    t.add_row("nvcc", status, escape(f"{nvcc}: {said}" if nvcc else said))
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
