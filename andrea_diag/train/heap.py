"""The Python heap settled once a run's set-up is done, so that a full collection mid-run is cheap.

    settle()    # once, after the warm-up updates: one full collection, the survivors frozen
    release()   # at the run's end: they are the collector's again

Why: after ``import torch`` and a model's set-up a process holds about 330k objects the
collector tracks (functions, type objects, torch's modules). A full (generation 2) collection
walks them all: 180-230 ms on this project's CPU machine, 145 ms on the H200's host, where one
fell inside an update (``bench/update_walls.py``, reports/bench-train/h200-2026-12-03b/).
The interpreter starts one whenever the objects that survived the younger collections grow by
a quarter, so the warm-up's allocations (the graphs' captures, the optimizer's state) make one
likely early in a run. ``gc.freeze`` moves every object alive now to a permanent generation
that later collections skip. What a run allocates later is collected as before; the frozen
objects are freed by reference counting as before, and only a reference cycle among them waits
for :func:`release`.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """One full collection (what is garbage now is freed, not frozen), then freeze the rest."""
    gc.collect()
    gc.freeze()


def release() -> None:
    """Give the frozen objects back to the collector (the run is over)."""
    gc.unfreeze()
