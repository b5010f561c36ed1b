"""Re-record ``cascade_tiny_metrics.json``, the pin of ``tests/test_golden.py``.

    python tests/golden/record_golden.py

Only when a change is *meant* to alter training numbers: the file proves that refactors of the
trainer leave every metric bit-identical on CPU. Say in the commit why it was re-recorded.

The cascade always runs in a child process under ``PINNED_ENV``, both when recording and when
testing, because CPU float arithmetic is not the same everywhere: the intra-op thread count
changes how reductions are split, ATen picks AVX-512, AVX2 or scalar kernels from the CPU it
finds (different vector widths sum in a different order), and MKL dispatches on the CPU model
and vendor. One thread, ATen's AVX2 kernels and MKL's conditional numerical reproducibility in
its ``AVX2`` branch make the numbers the same on every Intel CPU with AVX2, whatever the
parent's environment.

Why ``AVX2`` and not ``COMPATIBLE``: ``torch.sqrt`` on a CPU float tensor is MKL's vector math
(VML), and AdamW takes a square root every step. Under ``COMPATIBLE`` that square root is an
approximation refined in software, and its bits moved with the CPU. A million values: 152,738
not correctly rounded on this Sapphire Rapids machine, 144,451 under qemu's Haswell and
EPYC-Milan, and the cascade's columns moved from the first update. One CI machine saw the same
(stop 32). Under ``AVX2`` the square root is the exact instruction: 0 of the million, the same
bits natively and under qemu's Haswell. Its float64 square root still moved (2,919 of 200,000
inexact here, 1 under qemu's Haswell), so the toolkit's own float64 square roots on the CPU path
(the layer probe's group norms) are numpy's, the exact instruction. MKL refuses that branch on
non-Intel CPUs (it runs its
AUTO branch there), so the child reports the branch it got (``mkl_branch``) and the test skips
where it is not ``AVX2``, saying so: those numbers cannot be the recording's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
GOLDEN = HERE / "cascade_tiny_metrics.json"
# a few dozen updates crossing bandit boundaries, all seven clip modes (the three fixed ones and
# the four adaptive ones), both injected spike causes
ARGS = {
    "steps": 40,
    "lr": 3e-3,
    "seed": 0,
    "clips": ["none", "global", "per-tensor", "zclip", "agc", "spam", "skip"],
    "inject": ["outlier@25", "nonfinite@32"],
}
# Set in the child before torch is imported, overriding whatever the parent has.
PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
PINNED_CAPABILITY = "AVX2"  # what torch must report in the child for the pin to hold
PINNED_MKL_BRANCH = 10  # MKL_CBWR_AVX2: the branch MKL must have taken (mkl_branch)
# The built-in repo-docs source reads the installed packages' READMEs and stdlib docstrings,
# which differ between machines and under pytest: a committed copy keeps the tokens fixed.
REPO_DOCS = HERE / "repo-docs.md"
# wall clock (record.WALL_CLOCK_COLUMNS), never reproducible
SKIP_COLUMNS = {"time_s", "clip_ms", "unix_time_s"}


def run_golden_cascade(out: Path) -> dict[str, dict[str, list]]:
    """Run the pinned tiny cascade into ``out`` in this process; return {arm: {column: values}}.

    Only bit-reproducible under ``PINNED_ENV``: call ``run_pinned`` instead.
    """
    from rich.console import Console

    from andrea_diag.config import ProbeConfig, RunConfig
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
    from andrea_diag.record import read_jsonl

    # Every run default the numbers depend on is pinned here, not read from the tiny preset:
    # the preset's defaults are the README's first run and may change (issue 24).
    base = RunConfig(
        size="tiny", steps=ARGS["steps"], lr=ARGS["lr"], seed=ARGS["seed"], inject=ARGS["inject"],
        micro_batch=8, accum=2, seq_len=64, eval_every=1, checkpoint_every=4, device="cpu",
        mixer_sharpness=1.0,  # the seeds' mixer: tiny's own default is sharper (issue 24)
        # the update stats and the moments' norms every update (default: 10 each)
        probes=ProbeConfig(update_stats_every=1, moment_norms_every=1),
        sources={"gutenberg": "generated", "hermes3-general": "generated", "repo-docs": str(REPO_DOCS)},
    )  # fmt: skip
    spec = CascadeSpec(base=base, clips=list(ARGS["clips"]), out=out)
    run_cascade(spec, Console(stderr=True, quiet=True))
    result = {}
    for arm in ARGS["clips"]:
        df = read_jsonl(out / arm / "metrics.jsonl")
        result[arm] = {c: df[c].tolist() for c in sorted(df.columns) if c not in SKIP_COLUMNS}
    return result


def run_pinned(out: Path, extra_env: dict[str, str] | None = None) -> dict:
    """Run the cascade in a child under ``PINNED_ENV``; return {"capability", "metrics"}.

    ``extra_env`` is applied *before* the pin (it plays a different parent environment).
    """
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(extra_env or {}), **PINNED_ENV}
    result = out / "golden.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out / "c"), str(result)]
    subprocess.run(cmd, env=env, check=True, cwd=REPO)
    return json.loads(result.read_text())


def mkl_branch() -> int | None:
    """The CNR branch MKL runs in this process (``mkl_cbwr_get(MKL_CBWR_BRANCH)``: 10 is AVX2,
    2 AUTO, where MKL refused ``MKL_CBWR``), or None where torch's MKL does not export it."""
    import ctypes

    import torch

    lib_dir = Path(torch.__file__).parent / "lib"
    try:
        get = ctypes.CDLL(str(lib_dir / "libtorch_cpu.so")).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    return int(get(1))  # MKL_CBWR_BRANCH


def pin_holds(ran: dict) -> str | None:
    """Why a pinned run's numbers cannot be the recording's (None: they can)."""
    if ran["capability"] != PINNED_CAPABILITY:
        return f"torch ran its {ran['capability']} kernels here, not {PINNED_CAPABILITY}"
    if ran.get("mkl_branch") != PINNED_MKL_BRANCH:
        return (f"MKL refused its AVX2 reproducibility branch on this CPU (branch "
                f"{ran.get('mkl_branch')}; it takes it on Intel CPUs with AVX2 only), and its "
                "square root gives other bits")  # fmt: skip
    return None


def _child(out: Path, result: Path) -> None:
    sys.path.insert(0, str(REPO))  # the checkout this script belongs to, not another install
    import torch

    torch.set_num_threads(1)
    metrics = run_golden_cascade(out)
    capability = torch.backends.cpu.get_cpu_capability()
    payload = {"capability": capability, "mkl_branch": mkl_branch(), "metrics": metrics}
    result.write_text(json.dumps(payload, allow_nan=True))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(Path(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    with tempfile.TemporaryDirectory() as tmp:
        got = run_pinned(Path(tmp))
    why = pin_holds(got)
    if why is not None:
        sys.exit(f"{why}: not recorded")
    GOLDEN.write_text(json.dumps(got["metrics"], allow_nan=True) + "\n")
    n = sum(len(v) for v in got["metrics"].values())
    print(f"wrote {GOLDEN} ({n} columns)", file=sys.stderr)
