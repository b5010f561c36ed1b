"""Token batches per optimizer update: deterministic from (seed, update), recordable, replayable.

    >>> from andrea_diag.data import Mixer, prepare_data
    >>> data = prepare_data()
    >>> plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=8, accum=2, seq_len=64)
    >>> b = plan.batch(1)          # b.tokens: (A=2, m=8, T+1=65) int64; b.hash: 16 hex chars
    >>> tuple(b.tokens.shape)
    (2, 8, 65)
    >>> import pathlib, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = pathlib.Path(tmp.name) / "batches.json"
    >>> _ = plan.save(path)
    >>> BatchPlan.load(path, data).batch(1).hash == b.hash
    True
    >>> tmp.cleanup()

For every update, ``m × A`` sequences of ``seq_len + 1`` tokens are drawn: each sequence's source
by the current phase's weights, its start offset uniform in that source's stream. All draws use
a private ``torch.Generator`` seeded from (seed, update) alone, never the global RNG, so every arm
of an experiment sees exactly the same token batches whatever else it does with randomness.

With the ``exp3`` mixer the weights depend on the first arm's losses, so the first arm records
its plan (:meth:`BatchPlan.save`) and the later arms replay it (:meth:`BatchPlan.load`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.bandit import Mixer
from andrea_diag.data.heldout import training_part
from andrea_diag.data.prepare import PreparedData
from andrea_diag.data.seeds import batch_seed
from andrea_diag.errors import BadArgument, UserError
from andrea_diag.rundir import atomic_write_text, read_json

PLAN_FORMAT = "andrea-diag-batch-plan-v1"


@dataclasses.dataclass
class Batch:
    """One optimizer update's tokens: A microbatches of m sequences of T+1 tokens."""

    update: int  # 1-based optimizer update
    tokens: torch.Tensor  # (A, m, T+1) int64; inputs tokens[..., :-1], targets tokens[..., 1:]
    source_idx: torch.Tensor  # (A, m) int64, index into the plan's ``names``
    phase: int  # 0-based mixer phase index
    weights: dict[str, float]
    hash: str  # sha256 of the token ids, first 16 hex chars
    offsets: torch.Tensor  # (A, m) int64 start offset of each sequence in its source stream
    injected: torch.Tensor  # (A, m) bool: True where make_outlier_batch replaced the sequence

    @property
    def accum(self) -> int:
        return self.tokens.shape[0]

    @property
    def micro_batch(self) -> int:
        return self.tokens.shape[1]

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[2] - 1


def tokens_hash(tokens: torch.Tensor) -> str:
    """sha256 (first 16 hex chars) of the ids as little-endian int64: dtype- and device-free."""
    arr = tokens.detach().to("cpu", torch.int64).contiguous().numpy().astype("<i8", copy=False)
    return hashlib.sha256(arr.tobytes()).hexdigest()[:16]


def _streams_of(
    data: PreparedData | Mapping[str, torch.Tensor],
) -> tuple[tuple[str, ...], list[torch.Tensor]]:
    """The sources' names (``SOURCE_NAMES`` order; the given ones alone under --sources only)
    and their training parts."""
    streams = data.streams if isinstance(data, PreparedData) else data
    names = tuple(n for n in SOURCE_NAMES if n in streams)
    if not names:
        raise BadArgument(f"no stream for any of {SOURCE_NAMES}, got {list(streams)}")
    # the held-out tail of every source is never drawn for training (heldout.py)
    return names, [training_part(streams[n]) for n in names]


def gather_tokens(
    streams: list[torch.Tensor], source_idx: torch.Tensor, offsets: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Cut ``seq_len + 1`` tokens at each (source, offset); shapes follow ``source_idx``.

    One numpy slice a sequence (views of the streams, no copy of them): the per-source
    ``nonzero`` and fancy index this replaced were the largest host item of a 12m update on the
    H200 (0.38 ms of its own time profiled, issue 20), and the tokens are the same.
    """
    arrays = [s.numpy() for s in streams]
    t1 = seq_len + 1
    cut = [
        arrays[s][o : o + t1]
        for s, o in zip(source_idx.reshape(-1).tolist(), offsets.reshape(-1).tolist(), strict=True)
    ]
    out = torch.from_numpy(np.stack(cut).astype(np.int64, copy=False))  # (N, T+1)
    return out.view(*source_idx.shape, t1)


def record_fault(rec: Mapping[str, Any], lengths: list[int], n: int, seq_len: int) -> str | None:
    """Why a replayed record cannot be used (None: it can): an integer phase, a weight a
    source, and ``n`` integer sources and offsets, each source one of ``lengths``' streams,
    each cut inside it. The record is a run directory's file: untrusted, so nothing of it
    reaches an index unchecked."""
    phase, weights = rec.get("phase"), rec.get("weights")
    src, off = rec.get("source_idx"), rec.get("offsets")
    if type(phase) is not int or not isinstance(weights, list) or len(weights) != len(lengths):
        return f"its phase {phase!r} or its weights {weights!r} are not the plan's"
    if not all(type(w) in (int, float) for w in weights):
        return f"its weights {weights!r} are not numbers"
    if not isinstance(src, list) or not isinstance(off, list):
        return "its sources and offsets are not lists"
    if len(src) != n or len(off) != n:
        return f"{len(src)} sources and {len(off)} offsets where {n} are drawn"
    for s, o in zip(src, off, strict=True):
        if type(s) is not int or type(o) is not int or not 0 <= s < len(lengths):
            return f"source {s!r} at offset {o!r} is not one of the plan's cuts"
        if not 0 <= o <= lengths[s] - (seq_len + 1):
            return f"offset {o} does not fit {seq_len + 1} tokens in a stream of {lengths[s]}"
    return None


def draw_sequences(
    stream_lengths: list[int],
    weights: list[float],
    seed: int,
    update: int,
    micro_batch: int,
    accum: int,
    seq_len: int,
    names: tuple[str, ...] = SOURCE_NAMES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(source_idx, offsets), each (A, m) int64, from a generator seeded by (seed, update);
    ``names`` (the sources, in ``stream_lengths``' order) only name a short one."""
    n = micro_batch * accum
    starts = [length - seq_len for length in stream_lengths]  # valid start count a source
    if any(x < 1 for x in starts):
        short = [names[i] for i, x in enumerate(starts) if x < 1]
        raise UserError(
            f"source(s) {', '.join(short)} have fewer than seq_len + 1 = {seq_len + 1} tokens",
            hint="lower --seq-len or give those sources more text",
        )
    g = torch.Generator().manual_seed(batch_seed(seed, update))
    src = torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, True, generator=g)
    u = torch.rand(n, generator=g, dtype=torch.float64).numpy()  # (N,)
    # float64 in numpy, the same IEEE arithmetic as torch's, without a dispatch an op
    n_src = np.asarray(starts, dtype=np.float64)[src.numpy()]
    off = torch.from_numpy(np.minimum(np.floor(u * n_src), n_src - 1).astype(np.int64))
    return src.view(accum, micro_batch), off.view(accum, micro_batch)


class BatchPlan:
    """Batches for updates 1..N: recorded from a mixer, or replayed from a saved plan."""

    def __init__(
        self,
        data: PreparedData | Mapping[str, torch.Tensor],
        mixer: Mixer | None,
        *,
        seed: int,
        micro_batch: int,
        accum: int,
        seq_len: int,
    ) -> None:
        self.names, self.streams = _streams_of(data)
        self.lengths = [s.numel() for s in self.streams]  # fixed: the streams never change
        if mixer is not None and tuple(mixer.names) != self.names:
            raise BadArgument(f"the mixer mixes {mixer.names}, the data holds {self.names}")
        self.data_key = data.key if isinstance(data, PreparedData) else None
        self.mixer = mixer
        self.seed = seed
        self.micro_batch, self.accum, self.seq_len = micro_batch, accum, seq_len
        self.records: dict[int, dict[str, Any]] = {}
        self.replaying = False
        self._ahead: tuple[Batch, dict[str, Any] | None] | None = (
            None  # prefetch(): (batch, record)
        )

    # -- producing batches --------------------------------------------------------------------

    def batch(self, update: int) -> Batch:
        """The batch of ``update`` (1-based). Replay mode checks it against the recorded hash."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0].update == update:  # drawn by prefetch(update)
            if ahead[1] is not None:
                self.records[update] = ahead[1]
            return ahead[0]
        if self.replaying:
            return self._replay(update)
        b, self.records[update] = self._draw(update)
        return b

    def prefetch(self, update: int, last: int) -> None:
        """Draw ``update``'s batch now (the trainer: while the device runs the update before),
        where no loss still to be observed can change it: a replay, or the seeded mixer, up to
        update ``last``. The
        next :meth:`batch` call for ``update`` hands it over (and records it); nothing else
        changes, since each batch comes from its own (seed, update) generator."""
        self._ahead = None
        if update > last:  # past the run: nothing to draw (a mixer would grow a phase)
            return
        if self.replaying:
            if update in self.records:
                with contextlib.suppress(UserError):  # a bad record fails in batch(), in order
                    self._ahead = (self._replay(update), None)
        elif self.mixer is not None and not self.mixer.observes_losses:
            self._ahead = self._draw(update)

    def _draw(self, update: int) -> tuple[Batch, dict[str, Any]]:
        """A recording plan's batch of ``update``, and its record (stored by :meth:`batch`)."""
        if self.mixer is None:
            raise BadArgument("a recording BatchPlan needs a mixer")
        phase = self.mixer.phase_at(update)
        w = [phase.weights[n] for n in self.names]
        src, off = draw_sequences(
            self.lengths,
            w,
            self.seed,
            update,
            self.micro_batch,
            self.accum,
            self.seq_len,
            self.names,
        )
        tokens = gather_tokens(self.streams, src, off, self.seq_len)  # (A, m, T+1)
        b = Batch(update, tokens, src, phase.index, dict(phase.weights), tokens_hash(tokens), off,
                  torch.zeros_like(src, dtype=torch.bool))  # fmt: skip
        record = {
            "update": update,
            "phase": phase.index,
            "weights": w,
            "source_idx": src.reshape(-1).tolist(),
            "offsets": off.reshape(-1).tolist(),
            "hash": b.hash,
        }
        return b, record

    def _replay(self, update: int) -> Batch:
        rec = self.records.get(update)
        if rec is None:
            raise UserError(
                f"the recorded batch plan has no update {update} (it covers "
                f"{min(self.records, default=0)}..{max(self.records, default=0)})",
                hint="record the plan for at least as many updates as the replaying arm runs",
            )
        shape = (self.accum, self.micro_batch)
        why = record_fault(rec, self.lengths, self.accum * self.micro_batch, self.seq_len)
        if why is not None:
            raise UserError(f"the recorded batch plan's update {update} is damaged: {why}",
                            hint="record the plan again; a plan is not edited by hand")  # fmt: skip
        src = torch.tensor(rec["source_idx"], dtype=torch.int64).view(shape)
        off = torch.tensor(rec["offsets"], dtype=torch.int64).view(shape)
        tokens = gather_tokens(self.streams, src, off, self.seq_len)
        h = tokens_hash(tokens)
        if h != rec.get("hash"):
            raise UserError(
                f"replayed batch for update {update} differs from the recording "
                f"({h} != {rec.get('hash')!r}): the data changed since the plan was saved",
                hint="replay with the same sources (and overrides) the plan was recorded with",
            )
        weights = dict(zip(self.names, rec["weights"], strict=True))
        return Batch(update, tokens, src, rec["phase"], weights, h, off,
                     torch.zeros_like(src, dtype=torch.bool))  # fmt: skip

    def observe(self, update: int, loss_by_source: dict[str, float]) -> None:
        """Forward per-source losses to the mixer while recording; a no-op when replaying."""
        if not self.replaying and self.mixer is not None:
            self.mixer.observe(update, loss_by_source)

    def is_boundary(self, update: int) -> bool:
        """True for the first update of every phase after the first."""
        if self.replaying:
            prev = self.records.get(update - 1)
            cur = self.records.get(update)
            return bool(prev and cur and prev["phase"] != cur["phase"])
        return self.mixer is not None and self.mixer.is_boundary(update)

    # -- persistence --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The plan's position for a checkpoint: recorded batches and the mixer (its RNGs and
        an exp3 bandit's scores), so a resumed recording draws what it would have drawn."""
        return {"records": dict(self.records), "mixer": self.mixer, "replaying": self.replaying}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._ahead = None  # drawn from the state before
        self.records = dict(state["records"])
        self.mixer = state["mixer"]
        self.replaying = bool(state["replaying"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "seed": self.seed,
            "micro_batch": self.micro_batch,
            "accum": self.accum,
            "seq_len": self.seq_len,
            "sources": list(self.names),
            "data_key": self.data_key,
            "mixer": self.mixer.describe() if self.mixer is not None else None,
            "records": [self.records[u] for u in sorted(self.records)],
        }

    def save(self, path: str | Path) -> Path:
        """Write the per-update schedule (phase, weights, sources, offsets, hash) as JSON."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # atomic: a replaying arm never reads half a plan; a link at the name is replaced
        atomic_write_text(p, json.dumps(self.to_dict(), separators=(",", ":")))
        return p

    @classmethod
    def load(
        cls,
        path: str | Path,
        data: PreparedData | Mapping[str, torch.Tensor],
        like: BatchPlan | None = None,
    ) -> BatchPlan:
        """A replaying plan: same batches as the recording, verified by hash. ``like``: the
        plan this one must replay (its seed and shape; the cascade's own recording)."""
        p = Path(path)
        if not p.is_file():
            raise UserError(f"batch plan {str(p)!r} does not exist")
        d = read_json(p, "batch plan", kind=dict)  # a run dir's file: checked for its shape
        if d.get("format") != PLAN_FORMAT:
            raise UserError(f"{str(p)!r} is not a batch plan (format {d.get('format')!r})")
        names = list(_streams_of(data)[0])
        if d.get("sources") != names:
            raise UserError(f"batch plan sources {d.get('sources')} differ from {names}")
        key = data.key if isinstance(data, PreparedData) else None
        if key and d.get("data_key") and key != d["data_key"]:
            raise UserError(
                "the batch plan was recorded on different data",
                hint="replay with the same sources (and overrides) the plan was recorded with",
            )
        head = {k: d.get(k) for k in ("seed", "micro_batch", "accum", "seq_len")}
        if any(type(v) is not int or (v < 1 and k != "seed") for k, v in head.items()):
            raise UserError(f"batch plan {str(p)!r} is damaged (its seed and shape: {head})")
        want = {k: getattr(like, k) for k in head} if like is not None else head
        if head != want:
            raise UserError(f"batch plan {str(p)!r} was recorded for {head}, not {want}",
                            hint="replay a plan recorded by this run's first arm")  # fmt: skip
        records = d.get("records")
        # an update number as written: int() took 1.7 as 1 and "5" as 5, and Infinity raised
        # OverflowError (a traceback at --resume)
        if not isinstance(records, list) or not all(
            isinstance(r, dict) and type(r.get("update")) is int and r["update"] >= 1
            for r in records
        ):
            raise UserError(f"batch plan {str(p)!r} is damaged (a record without a whole "
                            "update number from 1)", hint="it is not one this toolkit wrote")  # fmt: skip
        try:
            plan = cls(data, None, **head)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"batch plan {str(p)!r} is damaged ({type(exc).__name__})") from None
        plan.records = {r["update"]: r for r in records}
        plan.replaying = True
        return plan
