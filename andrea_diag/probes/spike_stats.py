"""Pure spike statistics, no probe state: the OLMo 2 spike score and the batch's worst example.

from andrea_diag.probes.spike_stats import spike_score, batch_outlier
spike_score(grad_norms)                # % of values >= 7 std from the trailing mean
idx, z = batch_outlier(example_losses)  # the worst sequence and its robust z
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from andrea_diag.probes.base import robust_z

OUTLIER_REL_FLOOR = 1e-2
OLMO_WINDOW = 1000
OLMO_N_STD = 7.0
OLMO_MIN_HISTORY = 50


def spike_score(
    values: Sequence[float],
    window: int = OLMO_WINDOW,
    n_std: float = OLMO_N_STD,
    min_history: int = OLMO_MIN_HISTORY,
) -> float | None:
    """OLMo 2 spike score in percent: share of values >= ``n_std`` std from the rolling mean.

    The rolling mean/std cover the previous ``window`` finite values (current excluded,
    population std). Values with fewer than ``min_history`` finite predecessors are not scored.
    O(n) with cumulative sums, so it is cheap for long runs.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return None
    finite = np.isfinite(x)
    f = x[finite]
    centre = float(f.mean()) if f.size else 0.0  # centring keeps the cumsum variance accurate
    c1 = np.concatenate([[0.0], np.cumsum(f - centre)])
    c2 = np.concatenate([[0.0], np.cumsum((f - centre) ** 2)])
    # prior[i]: number of finite values before index i
    prior = np.concatenate([[0], np.cumsum(finite)[:-1]])
    scored = spikes = 0
    for i in range(x.size):
        c = int(prior[i])
        if c < min_history:
            continue
        scored += 1
        if not finite[i]:
            spikes += 1
            continue
        w = min(window, c)
        s1, s2 = c1[c] - c1[c - w], c2[c] - c2[c - w]
        mean = s1 / w
        std = math.sqrt(max(s2 / w - mean * mean, 0.0))
        if abs((x[i] - centre) - mean) >= n_std * std and (std > 0 or x[i] - centre != mean):
            spikes += 1
    return 100.0 * spikes / scored if scored else None


def batch_outlier(
    example_loss: torch.Tensor, rel_floor: float = OUTLIER_REL_FLOOR
) -> tuple[int | None, float | None]:
    """(index of the worst example, its robust z vs the batch); non-finite example wins (z inf)."""
    el = example_loss.detach().reshape(-1).tolist()  # host copy of n floats
    if not el:
        return None, None
    for i, x in enumerate(el):
        if not math.isfinite(x):
            return i, math.inf
    if len(el) < 3:
        return None, None
    idx = max(range(len(el)), key=el.__getitem__)
    others = el[:idx] + el[idx + 1 :]  # the batch without the candidate
    return idx, robust_z(el[idx], others, rel_floor)
