"""The metrics schema: every column of a run's metrics table, declared once.

    >>> from andrea_diag import metrics
    >>> metrics.lookup("clip_coef").owner
    'loop'
    >>> metrics.namespaced("loss_gutenberg"), metrics.namespaced("loss_z")
    ('loss/source/gutenberg', 'spikes/loss_z')
    >>> metrics.on_disk("eval/loss/gutenberg")
    'eval_loss_gutenberg'
    >>> metrics.undeclared(["loss", "layer_m/h00.mlp", "my_column"])  # [] for any run we write
    ['my_column']

A :class:`Column` names its **owner** (``"loop"``: the training loop, the toolkit's or a user's
through ``SpikeMonitor``; ``"evaluator"``: the held-out evaluation; else the ``name`` of the probe
that writes it), the **kind** of a present value (``float``/``int``/``bool``/``str``; a float
column may be empty, NaN, where it was not measured), a one-line meaning, and its **namespaced
name** in torchtitan's style (``loss/train``, ``clip/coef``, ``eval/loss/<source>``), which the
TensorBoard, W&B and MLflow exports use. The on-disk names are the historical flat ones
(``loss_<source>``, ``layer_m/<layer>``): runs already written keep reading the same.

Pattern columns hold one variable, ``{source}`` (a data source) or ``{layer}`` (a parameter group,
``<layer>.<kind>`` as :func:`andrea_diag.model.param_group_of` names it). A fixed name always wins
over a pattern (``loss_z`` is the spike probe's z-score, never the loss of a source named ``z``),
so :func:`lookup` checks the exact names first.

Probes declare the columns they write (``columns``, a class attribute of schema entries); the probe
driver refuses any other write with :class:`ColumnCollision` (``probes/driver.py``). A leaf module:
no torch, no package import, so the tests, the report and the exports can import it cheaply.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

LOOP, EVALUATOR = "loop", "evaluator"
SPIKES, OPTSTATE, LAYERS, LOCKIN = "spikes", "optstate", "layers", "lockin"  # probe names

# what a pattern's variable may hold: no "/" (the namespace separator); a layer is <layer>.<kind>
_VARIABLES = {"source": r"[^/]+", "layer": r"[^/.]+\.[^/]+"}
_VAR_IN = re.compile(r"\{(" + "|".join(_VARIABLES) + r")\}")


def _regex(template: str) -> re.Pattern[str]:
    parts = _VAR_IN.split(template)  # [text, var, text] for one variable, [text] for none
    if len(parts) == 1:
        return re.compile(re.escape(template))
    head, var, tail = parts
    return re.compile(re.escape(head) + f"({_VARIABLES[var]})" + re.escape(tail))


@dataclass(frozen=True)
class Column:
    """One metrics column, or a family of them (``name`` and ``tag`` with one variable)."""

    name: str  # on-disk name, or a template: "loss_{source}"
    owner: str  # LOOP, EVALUATOR, or the writing probe's ``name``
    kind: type  # float / int / bool / str
    tag: str  # namespaced name (template for a pattern): "loss/source/{source}"
    meaning: str
    optional: bool = False  # absent from some runs or rows of the trainer (fp16, eval updates)
    _name_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _tag_re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if _VAR_IN.findall(self.name) != _VAR_IN.findall(self.tag):
            raise ValueError(f"column {self.name!r}: its tag {self.tag!r} needs the same variable")
        object.__setattr__(self, "_name_re", _regex(self.name))
        object.__setattr__(self, "_tag_re", _regex(self.tag))

    @property
    def variable(self) -> str | None:
        """``"source"`` / ``"layer"`` for a pattern column, None for a fixed one."""
        found = _VAR_IN.search(self.name)
        return found.group(1) if found else None

    def match(self, name: str) -> str | None:
        """The variable part when ``name`` fits this column ("" for a fixed one), else None."""
        m = self._name_re.fullmatch(name)
        return None if m is None else (m.group(1) if m.groups() else "")

    def match_tag(self, tag: str) -> str | None:
        m = self._tag_re.fullmatch(tag)
        return None if m is None else (m.group(1) if m.groups() else "")

    def name_for(self, value: str = "") -> str:
        """The on-disk name of one member: ``LOSS_SOURCE.name_for("gutenberg")``."""
        return _VAR_IN.sub(lambda _: value, self.name)

    def tag_for(self, value: str = "") -> str:
        return _VAR_IN.sub(lambda _: value, self.tag)


C = Column
# -- the loop: one row per optimizer update ----------------------------------------------------
UPDATE = C("update", LOOP, int, "progress/update", "1-based optimizer update index: the row's unit")
MICROBATCHES = C("microbatches", LOOP, int, "progress/microbatches", "microbatches run, cumulative")
EXAMPLES = C("examples", LOOP, int, "progress/examples", "sequences trained on, cumulative")
TOKENS = C("tokens", LOOP, int, "progress/tokens", "supervised tokens trained on, cumulative")
PHASE = C("phase", LOOP, int, "data/phase", "bandit phase of this update's batch")
BOUNDARY = C("boundary", LOOP, bool, "data/boundary", "first update of a new bandit phase")
WEIGHT = C("w_{source}", LOOP, float, "data/weight/{source}", "bandit sampling weight of a source")
LOSS = C("loss", LOOP, float, "loss/train", "the group's token-weighted training loss (nats)")
LOSS_SOURCE = C("loss_{source}", LOOP, float, "loss/source/{source}",
                "token-weighted training loss of a source's sequences in the group (NaN: none)")  # fmt: skip
GRAD_NORM = C("grad_norm", LOOP, float, "grad_norm/total", "pre-clip global gradient L2 norm")
LR = C("lr", LOOP, float, "optim/lr", "learning rate this update used")
GRAD_NORM_POST = C("grad_norm_post", LOOP, float, "clip/grad_norm_post",
                   "global gradient norm after the clip: what the optimizer receives")  # fmt: skip
CLIP_COEF = C("clip_coef", LOOP, float, "clip/coef",
              "grad_norm_post / grad_norm (1.0 when the norm is 0 or non-finite)")  # fmt: skip
# the one test of "this update was clipped": clip_coef under this. The pre and post norms are
# two reductions, so an unclipped update can read 1 - 1e-7; exactly 1 is not the test
CLIPPED_BELOW = 1.0 - 1e-5
CLIP_MS = C("clip_ms", LOOP, float, "clip/ms", "wall time of the clip call (ms)")
NONFINITE = C("nonfinite", LOOP, bool, "clip/nonfinite", "the loss or gradient norm was NaN/Inf")
SKIPPED = C("skipped", LOOP, bool, "clip/skipped", "the clip mode chose to skip a finite update")
LOSS_SCALE = C("loss_scale", LOOP, float, "amp/loss_scale",
               "fp16 GradScaler scale this group's backward used", optional=True)  # fmt: skip
APPLIED = C("applied", LOOP, bool, "optim/applied", "the optimizer applied this update")
BATCH_HASH = C("batch_hash", LOOP, str, "data/batch_hash",
               "hash of this update's tokens (the same in every arm)")  # fmt: skip
INJECTED = C("injected", LOOP, str, "data/injected",
             "'outlier' / 'nonfinite' when this update was injected, else empty")  # fmt: skip
TIME_S = C(
    "time_s",
    LOOP,
    float,
    "progress/time_s",
    "wall time of the whole update (s); pipelined (train/pipeline.py): since the "
    "row before was finished, the updates overlapping",
)
UNIX_TIME_S = C(
    "unix_time_s",
    LOOP,
    float,
    "progress/unix_time_s",
    "when the row was recorded (seconds since the epoch; exports stamp it)",
    optional=True,
)  # fmt: skip  (runs before 2026-12-01 lack it)

# -- the held-out evaluator: present on evaluation updates only ---------------------------------
EVAL_LOSS = C("eval_loss", EVALUATOR, float, "eval/loss",
              "held-out loss, uniform mean over sources", optional=True)  # fmt: skip
EVAL_LOSS_SOURCE = C("eval_loss_{source}", EVALUATOR, float, "eval/loss/{source}",
                     "held-out token-weighted loss of a source", optional=True)  # fmt: skip
EVAL_ARGMAX_SHARE = C("eval_argmax_share", EVALUATOR, float, "eval/argmax_share",
                      "share of held-out positions predicting the most frequent argmax token",
                      optional=True)  # fmt: skip
EVAL_ARGMAX_SHARE_SOURCE = C("eval_argmax_share_{source}", EVALUATOR, float,
                             "eval/argmax_share/{source}", "argmax share within a source",
                             optional=True)  # fmt: skip
EVAL_ENTROPY = C("eval_entropy", EVALUATOR, float, "eval/entropy",
                 "mean predictive entropy on the held-out set (nats)", optional=True)  # fmt: skip
EVAL_ENTROPY_SOURCE = C("eval_entropy_{source}", EVALUATOR, float, "eval/entropy/{source}",
                        "mean predictive entropy within a source", optional=True)  # fmt: skip
EVAL_TOP1_PROB = C("eval_top1_prob", EVALUATOR, float, "eval/top1_prob",
                   "mean probability of the argmax token", optional=True)  # fmt: skip
EVAL_TOP1_PROB_SOURCE = C("eval_top1_prob_{source}", EVALUATOR, float, "eval/top1_prob/{source}",
                          "mean argmax probability within a source", optional=True)  # fmt: skip

# -- probes ------------------------------------------------------------------------------------
LAYER_GN = C("layer_gn/{layer}", LAYERS, float, "grad_norm/{layer}",
             "pre-clip gradient norm of one parameter group", optional=True)  # fmt: skip
LOSS_EXCESS = C("loss_excess", SPIKES, float, "spikes/loss_excess",
                "mix-adjusted loss: the batch's excess over its sources' recent losses")  # fmt: skip
EXAMPLE_LOSS_MAX_Z = C("example_loss_max_z", SPIKES, float, "spikes/example_loss_max_z",
                       "robust z of the batch's worst example")  # fmt: skip
LOSS_Z = C("loss_z", SPIKES, float, "spikes/loss_z", "robust z of the loss signal (warm-up: empty)")
GRAD_NORM_Z = C("grad_norm_z", SPIKES, float, "spikes/grad_norm_z",
                "robust z of the pre-clip gradient norm (warm-up: empty)")  # fmt: skip
SPIKE = C("spike", SPIKES, bool, "spikes/spike", "the online spike decision of this update")
UPDATE_RMS = C("update_rms", OPTSTATE, float, "optstate/update_rms",
               "RMS of this step's parameter change (every --update-stats-every updates and "
               "at spikes)")  # fmt: skip
COS_UPDATE_GRAD = C("cos_update_grad", OPTSTATE, float, "optstate/cos_update_grad",
                    "cosine between the update direction and the gradient Adam received "
                    "(every --update-stats-every updates and at spikes)")  # fmt: skip
M_NORM = C("m_norm", OPTSTATE, float, "optstate/m_norm", "global L2 norm of Adam's exp_avg (every "
           "--moment-norms-every updates, at spikes and until their recovery)", optional=True)  # fmt: skip
V_NORM = C("v_norm", OPTSTATE, float, "optstate/v_norm", "global L2 norm of Adam's exp_avg_sq (on m_norm's "
           "schedule)", optional=True)  # fmt: skip
LAYER_M = C("layer_m/{layer}", OPTSTATE, float, "optstate/m/{layer}",
            "exp_avg norm of one parameter group (on m_norm's schedule)", optional=True)  # fmt: skip
LAYER_V = C("layer_v/{layer}", OPTSTATE, float, "optstate/v/{layer}",
            "exp_avg_sq norm of one parameter group (on m_norm's schedule)", optional=True)  # fmt: skip
M_SPIKE_SHARE = C("m_spike_share", OPTSTATE, float, "optstate/m_spike_share",
                  "share of ||m|| the spike updates contribute (shadow buffers; on m_norm's schedule)",
                  optional=True)  # fmt: skip
V_SPIKE_SHARE = C("v_spike_share", OPTSTATE, float, "optstate/v_spike_share",
                  "share of ||v|| the spike updates contribute (shadow buffers; on m_norm's schedule)",
                  optional=True)  # fmt: skip
LOCKIN_TOP_TOKEN_SHARE = C("lockin/top_token_share", LOCKIN, float, "lockin/top_token_share",
                           "greedy samples: largest share of one token", optional=True)  # fmt: skip
LOCKIN_DISTINCT_1 = C("lockin/distinct_1", LOCKIN, float, "lockin/distinct_1",
                      "greedy samples: smallest distinct-unigram ratio", optional=True)  # fmt: skip
LOCKIN_MEAN_ENTROPY = C("lockin/mean_entropy", LOCKIN, float, "lockin/mean_entropy",
                        "greedy samples: mean next-token entropy (nats)", optional=True)  # fmt: skip
del C

SCHEMA: tuple[Column, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Column))
_FIXED = {c.name: c for c in SCHEMA if c.variable is None}
_FIXED_TAGS = {c.tag: c for c in SCHEMA if c.variable is None}
_PATTERNS = tuple(c for c in SCHEMA if c.variable is not None)


@functools.lru_cache(maxsize=8192)  # a run has ~100 distinct columns, each looked up per row
def lookup(name: str) -> Column | None:
    """The schema entry of an on-disk column name; exact names before patterns."""
    if name in _FIXED:
        return _FIXED[name]
    return next((c for c in _PATTERNS if c.match(name) is not None), None)


def owner_of(name: str) -> str | None:
    col = lookup(name)
    return col.owner if col is not None else None


def namespaced(name: str) -> str | None:
    """``clip_coef`` -> ``clip/coef``, ``loss_gutenberg`` -> ``loss/source/gutenberg``; None
    for a column the schema does not declare."""
    col = lookup(name)
    return None if col is None else col.tag_for(col.match(name) or "")


@functools.lru_cache(maxsize=8192)
def on_disk(tag: str) -> str | None:
    """The inverse of :func:`namespaced`: ``eval/loss/gutenberg`` -> ``eval_loss_gutenberg``."""
    if tag in _FIXED_TAGS:
        return _FIXED_TAGS[tag].name
    for col in _PATTERNS:
        value = col.match_tag(tag)
        if value is not None:
            return col.name_for(value)
    return None


def folder_tags() -> frozenset[str]:
    """Fixed tags that are also the folder of other tags (``eval/loss`` of ``eval/loss/<source>``):
    a store that keeps each metric as a file named by its tag (MLflow's file store) cannot hold
    both, so there the fixed one is written as ``<tag>/all``.

    >>> sorted(folder_tags())
    ['eval/argmax_share', 'eval/entropy', 'eval/loss', 'eval/top1_prob']
    """
    heads = {_VAR_IN.split(c.tag)[0] for c in _PATTERNS} | set(_FIXED_TAGS)
    return frozenset(t for t in _FIXED_TAGS if any(h.startswith(t + "/") for h in heads))


def owned_by(owner: str) -> tuple[Column, ...]:
    """Every entry ``owner`` writes (``owned_by(LOOP)``: the loop's own columns)."""
    return tuple(c for c in SCHEMA if c.owner == owner)


def undeclared(names: Iterable[str]) -> list[str]:
    """The names in ``names`` that no schema entry declares, in their order."""
    return [n for n in names if lookup(str(n)) is None]


def members(column: Column, names: Iterable[str]) -> dict[str, str]:
    """``{variable: name}`` of the columns in ``names`` that belong to the pattern ``column``
    (a fixed name such as ``loss_z`` never counts as a ``loss_{source}`` member)."""
    out = {}
    for name in names:
        if lookup(str(name)) is column:
            out[column.match(str(name)) or ""] = str(name)
    return out


def describe_owner(owner: str) -> str:
    return f"the {owner}" if owner in (LOOP, EVALUATOR) else f"probe {owner!r}"


class ColumnCollision(ValueError):
    """A probe wrote a column it does not own: undeclared, or the loop's or another's."""


class ProbeColumns:
    """The columns one probe may write, checked once per new name (a set lookup after that)."""

    def __init__(self, probe: str, declared: Sequence[Column]) -> None:
        self.probe = probe
        self.declared = tuple(declared)
        self.allowed: set[str] = set()  # names already checked: the fast path

    def check(self, name: str) -> None:
        """Allow ``name`` for this probe from now on, or raise :class:`ColumnCollision`."""
        col = lookup(name)  # the schema's entry first: it says who owns the name
        if col is None:  # a probe of the user's own may declare columns the schema lacks
            col = next((c for c in self.declared if c.match(name) is not None), None)
        if col is None:
            raise ColumnCollision(
                f"probe {self.probe!r} wrote column {name!r}, which no one declares (owner: "
                "none; add it to the probe's `columns`, see andrea_diag.metrics); not written"
            )
        if col.owner != self.probe and col.variable is not None:
            # A family name (loss_{source}) is the schema's, whoever declares a member: the
            # report and the exports read loss_aux as the loss of a source named "aux".
            raise ColumnCollision(
                f"probe {self.probe!r} wrote column {name!r}, which the schema's pattern "
                f"{col.name!r} reserves for {describe_owner(col.owner)} (its {col.variable} "
                f"{col.match(name)!r}), even when declared; refused: rename it, e.g. "
                f"'{self.probe}/{name}'"
            )
        if col.owner != self.probe:
            raise ColumnCollision(
                f"probe {self.probe!r} wrote column {name!r}, owned by "
                f"{describe_owner(col.owner)}; refused, that owner's value is kept"
            )
        if col not in self.declared:
            raise ColumnCollision(
                f"probe {self.probe!r} wrote column {name!r} (owner: probe {self.probe!r} in "
                "the schema) without declaring it in its `columns`; not written"
            )
        self.allowed.add(name)
