"""FSDP2 global-norm clipping on 2 processes: the sharded norm is the unsharded norm.

    pytest tests/test_sharded_norm.py -q        # gloo on 2 CPU processes (~25 s on 2 cores)
    pytest tests/test_sharded_norm.py -q -m cuda  # NCCL on 2 GPUs, the fused kernels (skips here)

One module-scoped fixture spawns 2 ranks once per backend (a spawn costs ~10 s of imports on 2
cores), and every case runs inside that one process group. Each rank builds the same model from
the same seed, keeps an unsharded deep copy, wraps the original with ``fully_shard``, runs one
forward/backward on the same batch (FSDP2 averages the two equal gradients, so the sharded
gradient is the unsharded one), clips with :func:`clip_grad_norm_sharded_` and gathers the
clipped gradients with ``full_tensor()``. The ranks write what they saw to files; the tests
below compare them in the parent: (a) the norm vs rank 0's unsharded copy (float64 truth and the
project's unsharded clip_grad_norm_), (b) gathered clipped gradients vs the unsharded clipped
gradients, (c) both ranks return the same norm.
"""

from __future__ import annotations

import copy
import math
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch import nn

from andrea_diag import clip_grad_norm_
from andrea_diag.clip import api, reference
from andrea_diag.clip.sharded import clip_grad_norm_sharded_, sharded_supported

WORLD = 2
RTOL = 1e-6  # fp32; the sharded sum only adds the same squares in another order
# name: (model, norm_type, max_norm as a fraction of the true norm, impl). A fraction below 1
# makes clipping active; 1e6 leaves the gradients alone.
CASES: dict[str, tuple[str, float, float, str]] = {
    "mlp-l2-active": ("mlp", 2.0, 0.25, "auto"),
    "mlp-l2-inactive": ("mlp", 2.0, 1e6, "auto"),
    "mlp-inf-active": ("mlp", math.inf, 0.25, "auto"),
    "mlp-p1.5-active": ("mlp", 1.5, 0.25, "reference"),
    "mlp-l2-torch-impl": ("mlp", 2.0, 0.25, "torch"),
    "gpt-tiny-l2-active": ("gpt", 2.0, 0.25, "auto"),
    "gpt-tiny-inf-active": ("gpt", math.inf, 0.25, "reference"),
}


# ---- what each rank runs (module level, so spawn can pickle it) ----


def _build(kind: str, dev: torch.device) -> nn.Module:
    torch.manual_seed(0)  # every rank builds the same weights: fully_shard keeps its own slice
    if kind == "gpt":
        from andrea_diag.config import MODEL_PRESETS
        from andrea_diag.model import GPT

        return GPT(MODEL_PRESETS["tiny"]).to(dev)
    # Awkward sizes: 53 and 5 rows split 27/26 and 3/2; the last layer's single row leaves
    # rank 1 an empty weight shard and an empty bias shard.
    mlp = nn.Sequential(nn.Linear(37, 53), nn.Tanh(), nn.Linear(53, 5), nn.Tanh(), nn.Linear(5, 1))
    return mlp.to(dev)


def _loss(model: nn.Module, kind: str, dev: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)  # the same batch on every rank and for the copy
    if kind == "gpt":
        vocab = model.cfg.vocab_size
        idx = torch.randint(0, vocab, (2, 17), generator=gen).to(dev)
        logits = model(idx[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))
    x, y = torch.randn(4, 37, generator=gen), torch.randn(4, 1, generator=gen)
    return nn.functional.mse_loss(model(x.to(dev)), y.to(dev))


def _shard(model: nn.Module, kind: str, mesh: object) -> None:
    from torch.distributed.fsdp import fully_shard

    inner = model.h if kind == "gpt" else [m for m in model if isinstance(m, nn.Linear)]
    for module in inner:
        fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _full_grads(model: nn.Module) -> dict[str, torch.Tensor]:
    # full_tensor() is a collective: both ranks gather every gradient in the same order
    return {n: p.grad.full_tensor().clone() for n, p in model.named_parameters()}


def _case(mesh: object, dev: torch.device, kind: str, p: float, frac: float, impl: str) -> dict:
    model = _build(kind, dev)
    ref = copy.deepcopy(model)  # the unsharded twin
    _loss(ref, kind, dev).backward()
    ref_grads = [q.grad for q in ref.parameters()]
    # The truth is float64: torch's own fp32 CPU norm is off by 7.8e-5 on gpt-tiny's lm_head
    # gradient (540k elements), far outside RTOL; the three-stage reference is not.
    truth = float(reference.float64_truth(ref_grads, math.inf, p)[0])
    max_norm = frac * truth
    ref_norm = clip_grad_norm_(ref.parameters(), max_norm, p, impl="reference")  # unsharded
    _shard(model, kind, mesh)
    _loss(model, kind, dev).backward()
    local = [q.grad.to_local() for q in model.parameters()]
    which = "torch" if impl == "torch" else api.resolve_impl(impl, local)  # what will run
    norm = clip_grad_norm_sharded_(model.parameters(), max_norm, p, impl=impl)
    return {
        "which": which,
        "norm": norm.clone(),
        "truth": truth,
        "ref_norm": ref_norm.clone(),
        "max_norm": max_norm,
        "grads": _full_grads(model),
        "ref_grads": {n: q.grad.clone() for n, q in ref.named_parameters()},
    }


def _nonfinite(mesh: object, dev: torch.device, rank: int) -> dict:
    """One NaN / one inf in rank 1's shard alone: every rank must see it in the norm."""
    out = {}
    for bad, p in ((math.nan, math.inf), (math.inf, 2.0), (math.nan, 2.0)):
        model = _build("mlp", dev)
        _shard(model, "mlp", mesh)
        _loss(model, "mlp", dev).backward()
        if rank == 1:
            with torch.no_grad():
                model[0].weight.grad.to_local().view(-1)[5] = bad
        out[f"{bad}-{p}"] = clip_grad_norm_sharded_(model.parameters(), 1.0, p).clone()
    return out


def _replicate(mesh: object, dev: torch.device) -> dict:
    """A Shard gradient and a Replicate gradient: the replica counts once, not twice."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    gen = torch.Generator().manual_seed(2)
    fulls = [torch.randn(7, 5, generator=gen).to(dev), torch.randn(11, generator=gen).to(dev)]
    grads = [torch.randn(7, 5, generator=gen).to(dev), torch.randn(11, generator=gen).to(dev)]
    out = {}
    for p in (2.0, math.inf):
        params = []
        for full, grad, placement in zip(fulls, grads, (Shard(0), Replicate()), strict=True):
            param = nn.Parameter(distribute_tensor(full.clone(), mesh, [placement]))
            param.grad = distribute_tensor(grad.clone(), mesh, [placement])
            params.append(param)
        copies = [g.clone() for g in grads]
        holders = [nn.Parameter(torch.zeros_like(c)) for c in copies]
        for h, c in zip(holders, copies, strict=True):
            h.grad = c
        ref = torch.nn.utils.clip_grad_norm_(holders, 0.5, p)
        norm = clip_grad_norm_sharded_(params, 0.5, p)
        out[p] = (norm.clone(), ref, [q.grad.full_tensor() for q in params], copies)
    return out


def _errors(mesh: object, dev: torch.device) -> dict[str, str]:
    """What the placements this module refuses raise (before any collective, on every rank)."""
    from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor

    out = {}
    partial = nn.Parameter(torch.zeros(4, device=dev))
    partial.grad = DTensor.from_local(torch.ones(4, device=dev), mesh, [Partial()])
    sharded = nn.Parameter(distribute_tensor(torch.zeros(4, device=dev), mesh, [Shard(0)]))
    sharded.grad = distribute_tensor(torch.ones(4, device=dev), mesh, [Shard(0)])
    plain = nn.Parameter(torch.zeros(3, device=dev))
    plain.grad = torch.ones(3, device=dev)
    for name, params in (("partial", [partial]), ("mixed", [sharded, plain])):
        try:
            clip_grad_norm_sharded_(params, 1.0)
            out[name] = "no error"
        except ValueError as exc:
            out[name] = str(exc)
    return out


def _worker(rank: int, port: int, out_dir: str, backend: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on two cores
    dev = torch.device("cpu")
    if backend == "nccl":  # one GPU a rank
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    # A short timeout: a rank that died leaves the other failing in a minute, not hanging.
    dist.init_process_group(backend, rank=rank, world_size=WORLD, timeout=timedelta(seconds=90))
    try:
        mesh = init_device_mesh(dev.type, (WORLD,))
        result = {name: _case(mesh, dev, *spec) for name, spec in CASES.items()}
        result["nonfinite"] = _nonfinite(mesh, dev, rank)
        result["replicate"] = _replicate(mesh, dev)
        result["errors"] = _errors(mesh, dev)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


# ---- the parent: spawn once, assert on what the ranks wrote ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=["gloo", pytest.param("nccl", marks=pytest.mark.cuda)])
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What each rank wrote: gloo on CPU here; NCCL on 2 GPUs (the fused kernels) where present."""
    backend = request.param
    ok, why = sharded_supported(backend)
    if not ok:
        pytest.skip(f"FSDP2 sharded clipping not testable with {backend} here: {why}")
    if backend == "nccl":
        if torch.cuda.device_count() < WORLD:
            pytest.skip(f"the NCCL run needs {WORLD} CUDA devices")
        from andrea_diag.clip import cuda

        ok, why = cuda.available()  # build once here, so the ranks only load the cached build
        assert ok, why  # on a GPU machine a build failure is a test failure, not a skip
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp(f"sharded-{backend}")
    mp.spawn(_worker, args=(_free_port(), str(out), backend), nprocs=WORLD, join=True)
    loaded = [torch.load(out / f"rank{r}.pt", map_location="cpu") for r in range(WORLD)]
    for rank in loaded:
        rank["backend"] = backend
    return loaded


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = RTOL) -> bool:
    return bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=0.0))


@pytest.mark.parametrize("name", list(CASES))
def test_sharded_norm_matches_unsharded(ranks: list[dict], name: str) -> None:
    r0, r1 = ranks[0][name], ranks[1][name]
    # (a) the global norm is the unsharded norm: the float64 truth and the project's own
    # unsharded clipper on rank 0's unsharded copy
    assert r0["norm"].dim() == 0 and r0["norm"].dtype == torch.float32
    truth = torch.tensor(r0["truth"], dtype=torch.float64)
    assert _close(r0["norm"], truth), (float(r0["norm"]), r0["truth"])
    assert _close(r0["norm"], r0["ref_norm"]), (float(r0["norm"]), float(r0["ref_norm"]))
    expect = {"nccl": "cuda", "gloo": "reference"}[ranks[0]["backend"]]
    assert r0["which"] == (CASES[name][3] if CASES[name][3] != "auto" else expect)
    # (c) both ranks return the same norm (the same all-reduce: bit for bit)
    assert torch.equal(r0["norm"], r1["norm"])
    # (b) the gathered clipped gradients are the unsharded clipped gradients
    clipped = r0["max_norm"] < r0["truth"]
    assert clipped == (CASES[name][2] < 1)
    for n, ref in r0["ref_grads"].items():
        got = r0["grads"][n]
        # elementwise: gradients scaled by the same factor (rtol); atol for entries near 0
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-7 * float(ref.abs().max())), n
        assert torch.equal(got, r1["grads"][n]), n
    if clipped:
        # after clipping, the whole gradient's norm is max_norm (float64, as the truth above)
        post = reference.float64_truth(list(r0["grads"].values()), math.inf, CASES[name][1])[0]
        assert _close(post, torch.tensor(r0["max_norm"]), rtol=1e-5)


def test_nonfinite_reaches_every_rank(ranks: list[dict]) -> None:
    for rank in ranks:
        res = rank["nonfinite"]
        assert math.isnan(float(res[f"{math.nan}-{math.inf}"]))  # NaN survives the MAX reduce
        assert float(res[f"{math.inf}-2.0"]) == math.inf
        assert math.isnan(float(res[f"{math.nan}-2.0"]))


@pytest.mark.parametrize("p", [2.0, math.inf])
def test_replicate_counted_once(ranks: list[dict], p: float) -> None:
    for rank in ranks:
        norm, ref, grads, ref_grads = rank["replicate"][p]
        assert _close(norm, ref), (float(norm), float(ref))
        for g, r in zip(grads, ref_grads, strict=True):
            assert torch.allclose(g, r, rtol=1e-6, atol=0.0)


def test_refused_placements_raise(ranks: list[dict]) -> None:
    for rank in ranks:
        assert "Partial" in rank["errors"]["partial"]
        assert "plain tensors" in rank["errors"]["mixed"]


# ---- no process group needed ----


def test_supported_here_and_an_unknown_backend_is_refused_by_name() -> None:
    ok, why = sharded_supported()
    assert isinstance(ok, bool) and why
    bad_ok, bad_why = sharded_supported("no-such-backend")
    assert bad_ok is False  # never supported, whatever this torch has
    if ok:  # past the FSDP2 checks, the refusal names the backend it did not know
        assert "no-such-backend" in bad_why


def test_plain_grads_fall_back_to_clip_grad_norm_() -> None:
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(37, 53, generator=gen), torch.randn(5, generator=gen)]
    a = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    b = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for pa, pb, g in zip(a, b, grads, strict=True):
        pa.grad, pb.grad = g.clone(), g.clone()
    norm = clip_grad_norm_sharded_(a, 0.5)
    expect = clip_grad_norm_(b, 0.5)
    assert torch.equal(norm, expect)
    assert all(torch.equal(pa.grad, pb.grad) for pa, pb in zip(a, b, strict=True))


@pytest.mark.parametrize(
    ("max_norm", "norm_type", "impl"),
    [(math.nan, 2.0, "auto"), (1.0, 0.0, "auto"), (1.0, -math.inf, "auto"), (1.0, 2.0, "nope")],
)
def test_bad_arguments(max_norm: float, norm_type: float, impl: str) -> None:
    param = nn.Parameter(torch.zeros(3))
    param.grad = torch.ones(3)
    with pytest.raises(ValueError):
        clip_grad_norm_sharded_([param], max_norm, norm_type, impl=impl)
