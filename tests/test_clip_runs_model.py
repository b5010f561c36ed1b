"""CPU model of the fused clip's work split (kernels/clip_device.cuh: norm_run), in Python.

    pytest tests/test_clip_runs_model.py -q

No GPU here: this mirrors the kernel's index arithmetic (tile_begin, owner_of, tensor_of, the
slot v + t of a piece, the counting at the end of a run) and checks the invariants the kernel
relies on, for the real 12m / 120m lists on an H200 grid and for random lists of tiny tensors:
only a run's first and last pieces can belong to a shared tensor (so counting just those two at
the end is complete), every slot of a launch is written exactly once, and a shared tensor's
pieces are the slots its finisher sums.
"""

from __future__ import annotations

import math
import random

import pytest

TILE = 256  # kernels/tensor_table.h: kTile
WARP_PIECE_BYTES = 8 * 1024  # kernels/clip_device.cuh: kWarpPieceBytes


def tile_begin(v: int, g: int, p: int) -> int:
    return v * p // g


def owner_of(i: int, g: int, p: int) -> int:
    return ((i + 1) * g - 1) // p


def simulate(numels: list[int], g: int, elem_bytes: int = 4) -> dict:
    """One launch: which slots each block writes and which shared tensors it counts."""
    starts = [0]
    for n in numels:
        starts.append(starts[-1] + -(-n // TILE))
    p = starts[-1]
    g = min(g, p)

    def tensor_of(i: int) -> int:
        return max(t for t in range(len(numels)) if starts[t] <= i)

    def owners(t: int) -> tuple[int, int]:
        first = owner_of(starts[t], g, p)
        return first, owner_of(starts[t + 1] - 1, g, p) - first + 1

    written: list[int] = []
    counted: dict[int, int] = {}
    warp_pieces = block_pieces = 0
    for v in range(g):
        lo, hi = tile_begin(v, g, p), tile_begin(v + 1, g, p)
        assert hi > lo  # no empty run
        t0, t1 = tensor_of(lo), tensor_of(hi - 1)
        if v > 0 and starts[t0] == lo:
            written.append(v + t0 - 1)  # the skipped slot, zeroed
        for t in range(t0, t1 + 1):
            first, n_seg = owners(t)
            if t0 < t < t1:
                assert n_seg == 1, "a tensor between the run's ends lies inside the run"
            a, b = max(lo, starts[t]), min(hi, starts[t + 1])
            n_elem = min(numels[t], (b - starts[t]) * TILE) - (a - starts[t]) * TILE
            if n_seg == 1 and n_elem <= WARP_PIECE_BYTES // elem_bytes:
                warp_pieces += 1
            else:
                block_pieces += 1
            assert first <= v < first + n_seg
            written.append(v + t)
        for k, t in enumerate((t0, t1)):
            _, n_seg = owners(t)
            if n_seg > 1 and not (k == 1 and t1 == t0):
                counted[t] = counted.get(t, 0) + 1
    return {
        "written": written,
        "counted": counted,
        "owners": {t: owners(t) for t in range(len(numels))},
        "g": g,
        "n": len(numels),
        "warp_pieces": warp_pieces,
        "block_pieces": block_pieces,
    }


def check(numels: list[int], g: int, elem_bytes: int = 4) -> dict:
    r = simulate(numels, g, elem_bytes)
    assert sorted(r["written"]) == list(range(r["g"] + r["n"] - 1)), "each slot written once"
    for t, (_first, n_seg) in r["owners"].items():
        # shared: counted once per piece, so exactly one block sees the counter reach n_seg
        assert r["counted"].get(t, 0) == (n_seg if n_seg > 1 else 0)
    return r


def model_numels(size: str) -> list[int]:
    from andrea_diag.bench.harness import grad_shapes

    return [math.prod(s) for s in grad_shapes(size)]


@pytest.mark.parametrize("size", ["12m", "120m"])
def test_real_lists_on_an_h200_grid_count_every_shared_piece_once(size: str) -> None:
    for elem_bytes in (4, 2):
        r = check(model_numels(size), 132 * 3, elem_bytes)
        assert r["warp_pieces"] > 0  # the layer norms and biases take the warp path


def test_random_lists_of_tiny_and_large_tensors_keep_the_slot_and_count_invariants() -> None:
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 40)
        numels = [rng.choice([1, 7, 256, 300, 2048, 2049, 5000, 70_000]) for _ in range(n)]
        check(numels, rng.choice([1, 2, 3, 7, 50, 396]))
