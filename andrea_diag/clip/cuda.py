"""Loader and Python face of the fused CUDA clipper (``kernels/clip.cu`` + ``kernels/binding.cpp``).

    from andrea_diag.clip import cuda
    ok, why = cuda.available()                       # builds on first use (~1 min), then cached
    total, per, scale, nonfinite = cuda.clip(grads, max_norm=1.0, norm_type=2.0, apply=True)

The extension is JIT-built with ``torch.utils.cpp_extension.load`` into ``TORCH_EXTENSIONS_DIR``
(torch's default cache when unset). Sources are found with
``importlib.resources.files("andrea_diag.kernels")`` (installed wheel) and, failing that, in the
repository's ``kernels/`` folder (running from a checkout via PYTHONPATH).

``variant`` picks the kernel schedule: ``"three"`` (partial -> final -> scale, the shipped path)
or ``"single"`` (one cooperative launch; benchmark comparison only, needs one dtype and at most
160 non-empty tensors). Nothing here syncs with the host.
"""

from __future__ import annotations

import importlib.resources
import math
import os
import shutil
import threading
from pathlib import Path
from types import ModuleType

import torch

from andrea_diag.clip import reference

EXT_NAME = "andrea_diag_clip"
SOURCES = ("binding.cpp", "clip.cu")
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VARIANTS = ("three", "single")

_lock = threading.Lock()
_ext: ModuleType | None = None
_status: tuple[bool, str] | None = None


def kernel_dir() -> Path:
    """Folder holding clip.cu / binding.cpp: the installed package data, else the repo's kernels/."""
    try:
        pkg = importlib.resources.files("andrea_diag.kernels")
        if pkg.joinpath("clip.cu").is_file():
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "kernels"


def nvcc_path() -> str | None:
    """The nvcc that cpp_extension will use (CUDA_HOME/bin/nvcc, else PATH), or None."""
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def load(verbose: bool = False) -> ModuleType:
    """Build (first time) and import the extension; raises on a build failure."""
    global _ext
    with _lock:
        if _ext is not None:
            return _ext
        from torch.utils import cpp_extension

        src = kernel_dir()
        missing = [s for s in SOURCES if not (src / s).is_file()]
        if missing:
            raise FileNotFoundError(f"kernel sources missing in {src}: {missing}")
        _ext = cpp_extension.load(
            name=EXT_NAME,
            sources=[str(src / s) for s in SOURCES],
            extra_include_paths=[str(src)],
            extra_cflags=["-O3"],
            # -lineinfo costs nothing at run time and gives compute-sanitizer source lines.
            extra_cuda_cflags=["-O3", "-lineinfo"],
            build_directory=_build_dir(),
            verbose=verbose,
        )
        return _ext


def _build_dir() -> str | None:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        return None  # torch's default cache folder
    path = Path(root) / EXT_NAME
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def available() -> tuple[bool, str]:
    """(usable, why): needs a CUDA device, a CUDA compiler and a successful build. Cached."""
    global _status
    if _status is not None:
        return _status
    if not torch.cuda.is_available():
        _status = (False, "no CUDA device")
    elif torch.version.cuda is None:
        _status = (False, "torch was built without CUDA")
    elif nvcc_path() is None:
        _status = (False, "no nvcc (set CUDA_HOME or put nvcc on PATH)")
    else:
        try:
            load()
            _status = (True, f"built from {kernel_dir()}")
        except Exception as exc:  # a build failure must degrade to the reference, not crash
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            _status = (False, f"extension build failed: {first[:200]}")
    return _status


def supports(grads: list[torch.Tensor], norm_type: float) -> bool:
    """Whether the kernels take this list (else the caller uses the reference)."""
    if not grads or not _norm_ok(norm_type):
        return False
    dev = grads[0].device
    return all(
        g.dtype in SUPPORTED_DTYPES and g.is_contiguous() and g.device == dev and not g.is_sparse
        for g in grads
    )


def clip(
    grads: list[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    apply: bool = True,
    variant: str = "three",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused clip; returns (total_norm, per_tensor_norm, scale, nonfinite), all float32/bool on device.

    Lists the kernels cannot take (float64, non-contiguous, p <= 0) run the reference instead,
    with identical semantics. ``variant="single"`` falls back to ``"three"`` for lists that do
    not fit one launch.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not supports(grads, norm_type):
        return _reference(grads, max_norm, norm_type, apply)
    ext = load()
    try:
        # supports() already routed what the kernels cannot take; the binding re-checks in C++.
        if variant == "single" and ext.single_supported(grads):
            return ext.clip_single(grads, float(max_norm), float(norm_type), bool(apply))
        return ext.clip(grads, float(max_norm), float(norm_type), bool(apply))
    except RuntimeError as exc:
        if "andrea_clip unsupported" not in str(exc):
            raise
        return _reference(grads, max_norm, norm_type, apply)


def _norm_ok(norm_type: float) -> bool:
    return norm_type > 0 or norm_type == math.inf


def _reference(
    grads: list[torch.Tensor], max_norm: float, norm_type: float, apply: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    acc = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
    return reference.clip_reference(grads, max_norm, norm_type, acc_dtype=acc, apply=apply)


# Stages alone (benchmarks and tests). Same device-resident outputs as the full pipeline.
def norm_partial(grads: list[torch.Tensor], norm_type: float = 2.0) -> torch.Tensor:
    """Stage 1: float32 partials, one per (tensor, chunk), in reference.grad_norm_partial order."""
    return load().norm_partial(grads, float(norm_type))


def chunk_offsets(grads: list[torch.Tensor]) -> torch.Tensor:
    """int32 (n_tensors + 1) prefix of chunk counts, cached on the device per list shape."""
    return load().chunk_offsets(grads)


def norm_final(
    partials: torch.Tensor, offsets: torch.Tensor, max_norm: float, norm_type: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 2: (total_norm, per_tensor_norm, scale, nonfinite) from the partials."""
    return load().norm_final(partials, offsets, float(max_norm), float(norm_type))


def scale_(grads: list[torch.Tensor], scale: torch.Tensor) -> None:
    """Stage 3: in place ``g *= scale``; every block exits at once when the scale is 1."""
    load().scale_(grads, scale)
