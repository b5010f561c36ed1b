"""Loader and Python face of the fused CUDA clipper (``csrc/clip.cu`` + ``csrc/binding.cpp``).

    from andrea_diag.clip import cuda
    ok, why = cuda.available()                       # builds on first use (~1 min), then cached
    total, per, scale, nonfinite = cuda.clip(grads, max_norm=1.0, norm_type=2.0, apply=True)

The extension is JIT-built with ``torch.utils.cpp_extension.load`` into ``TORCH_EXTENSIONS_DIR``
(torch's default cache when unset). Sources are found in the repository's ``csrc/`` folder
(running from a checkout) and, failing that, with
``importlib.resources.files("andrea_diag.kernels")`` (installed wheel).

``variant`` picks the kernel schedule: ``"three"`` (the shipped pair: the norm pass, whose block
finishing the last tensor computes the scale, then the scale pass, launched with programmatic
dependent launch on sm_90+ so that its launch overlaps the norm pass; :func:`set_pdl` or
``ANDREA_CLIP_PDL=0`` turn that off) or ``"single"`` (one cooperative launch; an experiment for
the benchmark, needs one dtype and at most 160 non-empty tensors). Both give the same bits.

Experiments live in ``csrc/dev/`` and build as a second extension, ``andrea_diag_clip_dev``
(:func:`load_dev`), only when a benchmark, ``variant="single"`` or ``ClippedAdamW`` asks for
it; the shipped clipper never builds them. Nothing here syncs with the host.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import threading
from pathlib import Path
from types import ModuleType

import torch

from andrea_diag.clip import reference

EXT_NAME = "andrea_diag_clip"
SOURCES = ("binding.cpp", "clip.cu")
DEV_EXT_NAME = "andrea_diag_clip_dev"
DEV_SOURCES = ("dev/binding_dev.cpp", "dev/clip_single.cu", "dev/adamw.cu")
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VARIANTS = ("three", "single")

_lock = threading.Lock()
_ext: ModuleType | None = None
_dev_ext: ModuleType | None = None
_status: tuple[bool, str] | None = None
_SUPPORTED: set[tuple[int, ...]] = set()  # the ids of lists found supported (supports())
_SUPPORTED_KEEP = 64


def kernel_dir() -> Path:
    """Folder holding the kernel sources: the checkout's csrc/ next to this package when
    there is one, else the installed package data.

    The checkout comes first: with an editable install of another checkout on the path,
    ``andrea_diag.kernels`` resolves to *that* checkout's folder, and this one would build
    someone else's kernels.
    """
    repo = Path(__file__).resolve().parents[2] / "csrc"
    if (repo / "clip.cu").is_file():
        return repo
    try:
        pkg = importlib.resources.files("andrea_diag.kernels")
        if pkg.joinpath("clip.cu").is_file():
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return repo


def nvcc_path() -> str | None:
    """The nvcc that cpp_extension will use (CUDA_HOME/bin/nvcc, else PATH), or None."""
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def load(verbose: bool = False) -> ModuleType:
    """Build (first time) and import the production extension; raises on a build failure."""
    global _ext
    with _lock:
        if _ext is None:
            _ext = _build(EXT_NAME, SOURCES, verbose)
        return _ext


def load_dev(verbose: bool = False) -> ModuleType:
    """Build (first time) and import the experiments' extension (csrc/dev/)."""
    global _dev_ext
    with _lock:
        if _dev_ext is None:
            _dev_ext = _build(DEV_EXT_NAME, DEV_SOURCES, verbose)
        return _dev_ext


def _build(name: str, sources: tuple[str, ...], verbose: bool) -> ModuleType:
    from torch.utils import cpp_extension

    src = kernel_dir()
    missing = [s for s in sources if not (src / s).is_file()]
    if missing:
        raise FileNotFoundError(f"kernel sources missing in {src}: {missing}")
    return cpp_extension.load(
        name=name,
        sources=[str(src / s) for s in sources],
        extra_include_paths=[str(src), str(src / "dev")],
        extra_cflags=["-O3"],
        # -lineinfo costs nothing at run time and gives compute-sanitizer source lines.
        extra_cuda_cflags=["-O3", "-lineinfo"],
        build_directory=_build_dir(name),
        verbose=verbose,
    )


def _build_dir(name: str) -> str | None:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        return None  # torch's default cache folder
    path = Path(root) / name
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
    """Whether the kernels take this list (else the caller uses the reference).

    A list of the same tensor objects as one found supported before is again (its ids: a
    training loop passes the same gradients, moments and buffers every update). The walk over
    a list reads four attributes a tensor, about 0.5 us a tensor, and ran about five times an
    update over 150-300 tensors: 0.58 ms an update in the H200 host's profile at 12m, where an
    update is about 4 ms (cProfile, which inflates it; issue 20).
    An id reused since by another tensor (a freed gradient's) can differ only in what the
    binding checks again: dtype, layout and contiguity raise its ``UnsupportedInput`` (so the
    reference runs, :func:`clip`), and a device other than the first tensor's is refused."""
    if not grads or not reference.norm_type_ok(norm_type):
        return False
    key = tuple(map(id, grads))
    if key in _SUPPORTED:
        return True
    dev = grads[0].device
    ok = all(
        g.dtype in SUPPORTED_DTYPES and g.is_contiguous() and g.device == dev and not g.is_sparse
        for g in grads
    )
    if ok:
        if len(_SUPPORTED) >= _SUPPORTED_KEEP:  # a loop uses a handful of lists
            _SUPPORTED.clear()
        _SUPPORTED.add(key)
    return ok


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
        # supports() already routed what the kernels cannot take; the binding re-checks in C++
        # and raises its registered UnsupportedInput type for what the reference can still do.
        if variant == "single":
            dev = load_dev()
            if dev.single_supported(grads):
                return dev.clip_single(grads, float(max_norm), float(norm_type), bool(apply))
        return ext.clip(grads, float(max_norm), float(norm_type), bool(apply))
    except unsupported_errors():
        return _reference(grads, max_norm, norm_type, apply)


def unsupported_errors() -> tuple[type[BaseException], ...]:
    """The extensions' registered ``UnsupportedInput`` types (RuntimeError subclasses): an
    input the kernels cannot take but the reference can. Matched by type, never by message: an
    old build that registers no such type contributes nothing (its errors are raised)."""
    found = (getattr(m, "UnsupportedInput", None) for m in (_ext, _dev_ext) if m is not None)
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))


def _reference(
    grads: list[torch.Tensor], max_norm: float, norm_type: float, apply: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    acc = reference.acc_dtype(grads)
    return reference.clip_reference(grads, max_norm, norm_type, acc_dtype=acc, apply=apply)


# Stages alone (benchmarks and tests). Same device-resident outputs as the full pipeline.
def norm_partial(grads: list[torch.Tensor], norm_type: float = 2.0) -> torch.Tensor:
    """The norm pass alone (no final reduction): float32 partials, one per (tensor, chunk), in reference.grad_norm_partial order."""
    return load().norm_partial(grads, float(norm_type))


def chunk_offsets(grads: list[torch.Tensor]) -> torch.Tensor:
    """int32 (n_tensors + 1) prefix of chunk counts, cached on the device per list shape."""
    return load().chunk_offsets(grads)


def norm_final(
    partials: torch.Tensor, offsets: torch.Tensor, max_norm: float, norm_type: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The final reduction alone: (total_norm, per_tensor_norm, scale, nonfinite) from the partials."""
    return load().norm_final(partials, offsets, float(max_norm), float(norm_type))


def set_pdl(enabled: bool) -> bool:
    """Launch the scale pass with programmatic dependent launch (sm_90+) or not; returns the
    previous setting. Read when a clip is launched (so also when it is graph-captured)."""
    return bool(load().set_pdl(bool(enabled)))


def pdl_enabled() -> bool:
    """Whether the scale pass is launched with programmatic dependent launch."""
    return bool(load().pdl_enabled())


def set_parked_pieces(enabled: bool) -> bool:
    """The norm pass's per-tensor pieces reduced per warp and summed by the block every few
    pieces (True, the default) or one block reduction per piece (False, the earlier kernel,
    kept for bench-kernels' side-by-side rows); returns the previous setting. Read when a clip
    is launched (so also when it is graph-captured). The two may differ in the last bits."""
    return bool(load().set_parked_pieces(bool(enabled)))


# The norm pass's load modes (csrc/clip.h: kLoadCached, kLoadEvictFirst, kLoadStream).
NORM_LOADS = ("cached", "evict_first", "stream")


def set_norm_load(mode: str) -> str:
    """How the norm pass loads the gradients; returns the previous mode. ``"cached"``: the
    read-only path with L2's default policy; ``"evict_first"``: an L2 evict-first policy, so the
    pass replaces its own lines instead of what L2 held (dirty lines cost a write-back each);
    ``"stream"``: the streaming cache operator (``ld.global.cs``). The same bits in every mode.
    Read when a clip is launched (so also when it is graph-captured); parked pieces only.
    Below sm_80 (no L2 cache hints) ``"evict_first"`` loads as ``"cached"`` does."""
    if mode not in NORM_LOADS:
        raise ValueError(f"norm load mode {mode!r}: expected one of {', '.join(NORM_LOADS)}")
    before = load().set_norm_load(NORM_LOADS.index(mode))
    if not 0 <= before < len(NORM_LOADS):  # the binding's -1: a mode it does not know
        raise RuntimeError(f"the clip extension refused norm load mode {mode!r}: rebuild it")
    return NORM_LOADS[before]


def scale_(grads: list[torch.Tensor], scale: torch.Tensor) -> None:
    """The scale pass alone: in place ``g *= scale``; every block exits at once when the scale is 1."""
    load().scale_(grads, scale)


def spike_flag(
    grad_norm: torch.Tensor, signal: torch.Tensor, grad_max: float, signal_max: float
) -> torch.Tensor:
    """0-dim bool on the device: ``grad_norm`` (one float32) or the mean of ``signal`` is
    non-finite or not at or below its bound (k_spike_flag: one launch, the bounds as kernel
    arguments, no host sync). Raises the extension's ``UnsupportedInput`` for a signal dtype
    the kernels cannot take."""
    return load().spike_flag(grad_norm, signal, grad_max, signal_max)


def skip_flag(
    nonfinite: torch.Tensor, loss: torch.Tensor, skip: torch.Tensor | None
) -> torch.Tensor:
    """0-dim float32 on the device: 1 where ``nonfinite``, the loss is non-finite, or ``skip``
    (k_skip_flag: one launch, no host sync). Raises the extension's ``UnsupportedInput`` for a
    loss dtype the kernels cannot take."""
    return load().skip_flag(nonfinite, loss, skip)


def copy_if(dst: list[torch.Tensor], src: list[torch.Tensor], flag: torch.Tensor) -> None:
    """``dst[i] = src[i]`` where the 0-dim bool ``flag`` is set on the device (k_copy_if: every
    block returns at once when it is not; no host sync). Raises the extension's
    ``UnsupportedInput`` for what the kernels cannot take."""
    load().copy_if(dst, src, flag)
