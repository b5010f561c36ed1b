"""The bandit mixer: phases of 7/14/21/28/42 optimizer updates, new source weights at each.

    >>> mixer = Mixer(seed=0)                       # policy "seeded"
    >>> mixer.boundaries(100)                       # first update of every phase after the first
    [29, 57, 78, 99]
    >>> sorted(mixer.phase_at(1).weights)           # one weight a source, summing to 1
    ['gutenberg', 'hermes3-general', 'repo-docs']

Every boundary is a small distribution shock (the seeds' third spike source), so the mixer makes
successive phases genuinely different: under the default ``seeded`` policy the dominant source
changes at every boundary and the weights move by at least ``MIN_SHIFT`` in L1 distance. The
schedule is a pure function of (seed, n_updates), so clipped and unclipped arms see the same one.

``sharpness`` shapes the seeded weights: each source draws ``u`` uniform in ``RAW_WEIGHT_RANGE``
and weighs ``u ** sharpness`` (normalised). At 1 (the seeds' mixer) a phase's top source has
about half the mass; at 4 it has about 70% and a phase's rarest source a few percent, so the
model specialises within a phase and a boundary is a shock it feels (tiny's default, issue 24).

Policy ``exp3`` is an EXP3-style online mixer in the spirit of online data mixing (Albalak et
al., 2023): the reward of a source is its training loss (higher loss, more weight: "learn what
you don't know yet"). Weights still change only at phase boundaries, and the phase lengths are
the same as the seeded policy's for the same seed. Its weights depend on the losses, so
experiments record its batches once and replay them (see :class:`batches.BatchPlan`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.generators import Rng
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.fields import MAX_SEED, MAX_UPDATES

PHASE_LENGTHS = (7, 14, 21, 28, 42)  # optimizer updates per phase (the seeds' bandit)
MIXER_POLICIES = ("seeded", "exp3")
RAW_WEIGHT_RANGE = (0.1, 0.7)  # the seeds' example weights (0.1..0.7), normalised to sum 1
MIN_SHIFT = 0.3  # minimum L1 change of the seeded weights at a boundary
MIN_SHARPNESS = 0.5  # below ~0.22 three sources cannot shift by MIN_SHIFT; 0.5 keeps a margin


@dataclass(frozen=True)
class Phase:
    """A run of updates with fixed source weights. ``start`` is the 1-based first update."""

    index: int  # 0-based
    start: int
    length: int
    weights: dict[str, float] = field(hash=False)

    @property
    def end(self) -> int:
        """The last update of the phase (inclusive)."""
        return self.start + self.length - 1

    @property
    def dominant(self) -> str:
        return max(self.weights, key=lambda n: self.weights[n])

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": self.start,
            "length": self.length,
            "weights": dict(self.weights),
        }


def _check_exp3(eta: float, smoothing: float) -> None:
    """exp3's inverse temperature (finite, 0 or more: ``inf`` makes every weight nan) and
    its smoothing (a share of the newest loss, in (0, 1])."""
    if not (math.isfinite(eta) and eta >= 0):
        raise BadArgument(f"exp3 inverse temperature eta must be finite and 0 or more, got {eta}")
    if not 0.0 < smoothing <= 1.0:
        raise BadArgument(f"exp3 smoothing must be in (0, 1], got {smoothing}")


def _check_seed_and_names(seed: int, names: tuple[str, ...]) -> None:
    """A seed as the config takes one (an int, 0 to ``MAX_SEED``: ``True`` or ``"a"`` seeded a
    schedule of their own), and source names: a tuple of distinct strs, at least one (a
    ``str`` was one source per letter, ``()`` phases of no weights, a name twice one weight)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise BadType(f"mixer seed must be an int, got {type(seed).__name__} {seed!r}"[:300])
    if not 0 <= seed <= MAX_SEED:
        raise BadArgument(f"mixer seed must be from 0 to {MAX_SEED}, got {seed}")
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise BadType(f"source_names must be a tuple of str, got {names!r}"[:300])
    if not names or len(set(names)) != len(names):
        raise BadArgument(f"source_names must name at least one source, each once, got "
                          f"{tuple(names)!r}"[:300])  # fmt: skip


class Mixer:
    """Phase schedule plus per-phase source weights, under the ``seeded`` or ``exp3`` policy."""

    # a checkpoint written before the knob restores its mixer without __init__ (state_codec):
    # it then reads the seeds' mixer, as its config.json does
    sharpness: float = 1.0

    def __init__(
        self,
        seed: int = 0,
        policy: str = "seeded",
        source_names: tuple[str, ...] = SOURCE_NAMES,
        *,
        gamma: float = 0.1,
        eta: float = 2.0,
        smoothing: float = 0.5,
        sharpness: float | None = None,
    ) -> None:
        if policy not in MIXER_POLICIES:
            raise UserError(f"unknown mixer {policy!r}", hint="choose seeded or exp3")
        if policy == "exp3" and sharpness is not None:  # it would be silently ignored
            raise UserError(f"mixer sharpness shapes the seeded mixer only, not exp3 (got "
                            f"{sharpness!r})", hint="leave sharpness unset for exp3")  # fmt: skip
        sharpness = 1.0 if sharpness is None else sharpness  # None: the seeds' mixer
        if isinstance(sharpness, bool) or not isinstance(sharpness, numbers.Real):
            raise BadType(f"mixer sharpness must be a number, got {type(sharpness).__name__}")
        if not (math.isfinite(sharpness) and sharpness >= MIN_SHARPNESS):
            raise UserError(
                f"mixer sharpness must be at least {MIN_SHARPNESS}, got {sharpness}",
                hint="flatter weights cannot make the weight shift a phase boundary must have",
            )
        if not 0.0 <= gamma <= 1.0:
            raise UserError(f"exp3 exploration gamma must be in [0, 1], got {gamma}")
        _check_exp3(eta, smoothing)
        _check_seed_and_names(seed, source_names)
        seed = int(seed)  # a numpy int as Python's: describe() goes to JSON
        self.seed = seed
        self.policy = policy
        self.names = tuple(source_names)
        self.gamma = gamma  # exp3: share of the mass spread uniformly (exploration)
        self.eta = eta  # exp3: inverse temperature, per nat of loss
        self.smoothing = smoothing  # exp3: weight of the newest phase's loss in the score
        self.sharpness = float(sharpness)  # seeded: weights u ** sharpness (1: the seeds')
        # Two independent streams: lengths never depend on weights, so both policies share
        # the same boundaries for one seed.
        self._len_rng = Rng(seed, "bandit-lengths")
        self._w_rng = Rng(seed, "bandit-weights")
        self._phases: list[Phase] = []
        self._lengths: list[int] = []
        self._score = dict.fromkeys(self.names, 0.0)  # exp3: smoothed loss per source
        self._sums: dict[str, float] = dict.fromkeys(self.names, 0.0)  # current phase's losses
        self._counts: dict[str, int] = dict.fromkeys(self.names, 0)
        self.history: list[dict[str, Any]] = []  # exp3: what each boundary decision saw

    # -- schedule -----------------------------------------------------------------------------

    def phase_at(self, update: int) -> Phase:
        """The phase containing ``update`` (1-based).

        With ``exp3`` a phase's weights are fixed when it is first reached, from the losses
        observed so far, so call :meth:`observe` for earlier updates before asking for later
        phases.
        """
        if update < 1:
            raise BadArgument(f"updates are 1-based, got {update}")
        if update > MAX_UPDATES:  # the phases up to it would fill the memory, for hours
            raise BadArgument(f"update {update} is past the most a run takes ({MAX_UPDATES:,})")
        while not self._phases or self._phases[-1].end < update:
            self._new_phase()
        lo, hi = 0, len(self._phases) - 1
        while lo < hi:  # binary search: phases are sorted and contiguous
            mid = (lo + hi) // 2
            if self._phases[mid].end < update:
                lo = mid + 1
            else:
                hi = mid
        return self._phases[lo]

    def is_boundary(self, update: int) -> bool:
        """True for the first update of every phase after the first."""
        return update > 1 and self._start_of(update) == update

    def boundaries(self, n_updates: int) -> list[int]:
        """First updates of phases 2, 3, ... up to ``n_updates``; the same for both policies."""
        out, start, i = [], 1, 0
        while True:
            start += self._length(i)
            i += 1
            if start > n_updates:
                return out
            out.append(start)

    def schedule(self, n_updates: int) -> list[Phase]:
        """All phases that touch updates 1..n_updates (exp3: only those already reached)."""
        if self.policy == "seeded":
            self.phase_at(n_updates)
        return [p for p in self._phases if p.start <= n_updates]

    def _start_of(self, update: int) -> int:
        start, i = 1, 0
        while start + self._length(i) <= update:
            start += self._length(i)
            i += 1
        return start

    def _length(self, i: int) -> int:
        """Length of phase ``i``, drawn lazily from its own stream (independent of weights)."""
        while len(self._lengths) <= i:
            self._lengths.append(self._len_rng.choice(PHASE_LENGTHS))
        return self._lengths[i]

    def _new_phase(self) -> None:
        i = len(self._phases)
        start = self._phases[-1].end + 1 if self._phases else 1
        prev = self._phases[-1].weights if self._phases else None
        weights = self._seeded_weights(prev) if self.policy == "seeded" else self._exp3_weights()
        self._phases.append(Phase(i, start, self._length(i), weights))

    # -- seeded policy ------------------------------------------------------------------------

    def _seeded_weights(self, prev: dict[str, float] | None) -> dict[str, float]:
        lo, hi = RAW_WEIGHT_RANGE
        for _ in range(10_000):
            raw = [lo + (hi - lo) * self._w_rng.random() for _ in self.names]
            if self.sharpness != 1.0:  # 1.0: the seeds' draws, bit for bit
                raw = [r**self.sharpness for r in raw]
            total = sum(raw)
            w = {n: r / total for n, r in zip(self.names, raw, strict=True)}
            if prev is None or len(self.names) == 1:
                return w
            new_top = max(w, key=lambda n: w[n])
            old_top = max(prev, key=lambda n: prev[n])
            shift = sum(abs(w[n] - prev[n]) for n in self.names)
            if new_top != old_top and shift >= MIN_SHIFT:  # a real shock, not a wiggle
                return w
        # Practically unreachable (acceptance is ~30%); rotating keeps the schedule total.
        vals = [prev[n] for n in self.names]  # type: ignore[index]
        return dict(zip(self.names, vals[1:] + vals[:1], strict=True))

    @property
    def observes_losses(self) -> bool:
        """True where :meth:`observe` can change later phases (exp3): a batch can then be
        drawn only after the updates before it reported their losses."""
        return self.policy == "exp3"

    # -- exp3 policy --------------------------------------------------------------------------

    def observe(self, update: int, loss_by_source: dict[str, float]) -> None:
        """Report update ``update``'s mean training loss per source (no-op for ``seeded``).

        Non-finite losses (an injected NaN, an fp16 overflow) are ignored: one broken batch
        must not steer the data mixture.
        """
        if self.policy != "exp3":
            return
        self.phase_at(update)  # make sure the phase the loss belongs to exists
        for name, loss in loss_by_source.items():
            if name in self._sums and math.isfinite(loss):
                self._sums[name] += float(loss)
                self._counts[name] += 1

    def _exp3_weights(self) -> dict[str, float]:
        k = len(self.names)
        if self._phases:
            # Per-source mean loss over the phase that just ended. Every source's loss is
            # measured on its own examples, so it is already unbiased and needs no 1/p
            # importance weighting (classic EXP3 sees only the pulled arm's reward).
            seen = {}
            for n in self.names:
                if self._counts[n]:
                    seen[n] = self._sums[n] / self._counts[n]
                    self._score[n] = (1 - self.smoothing) * self._score[n] + self.smoothing * seen[
                        n
                    ]
            self.history.append({"phase": len(self._phases), "mean_loss": seen})
            self._sums = dict.fromkeys(self.names, 0.0)
            self._counts = dict.fromkeys(self.names, 0)
        top = max(self._score.values())
        expw = {n: math.exp(self.eta * (self._score[n] - top)) for n in self.names}
        z = sum(expw.values())
        return {n: (1 - self.gamma) * expw[n] / z + self.gamma / k for n in self.names}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "seed": self.seed,
            "phase_lengths": list(PHASE_LENGTHS),
            "sources": list(self.names),
        }
        if self.policy == "exp3":
            out.update(gamma=self.gamma, eta=self.eta, smoothing=self.smoothing)
        else:
            out.update(
                raw_weight_range=list(RAW_WEIGHT_RANGE), min_shift=MIN_SHIFT,
                sharpness=self.sharpness,
            )  # fmt: skip
        return out
