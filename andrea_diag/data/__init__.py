"""The offline data layer: three sources → BPE (8449 tokens) → bandit mixer → batches.

    >>> from andrea_diag.data import prepare_data, Mixer, BatchPlan
    >>> data = prepare_data()                                   # cached after the first call
    >>> plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=8, accum=2, seq_len=64)
    >>> batch = plan.batch(1)                                   # tokens (A, m, T+1)

Modules: ``corpus`` (sources, overrides), ``generators`` (seeded prose and dialogue),
``tokenizer`` (training + cache), ``token_ids`` (pre-tokenized sources: ``.bin``/``.npy`` ids
with a declared vocabulary, no tokenizer), ``prepare`` (one-call pipeline), ``bandit`` (phases
and weights), ``batches`` (per-update batches, record/replay), ``injection`` (--inject's outlier).
"""

from andrea_diag.data.bandit import MIXER_POLICIES, PHASE_LENGTHS, Mixer, Phase
from andrea_diag.data.batches import Batch, BatchPlan, batch_seed, tokens_hash
from andrea_diag.data.corpus import (
    EOT,
    Source,
    build_sources,
    load_override,
    parse_source_overrides,
)
from andrea_diag.data.injection import make_outlier_batch, outlier_generator
from andrea_diag.data.prepare import PreparedData, prepare_data
from andrea_diag.data.token_ids import TokenSource, load_token_file
from andrea_diag.data.tokenizer import default_cache_dir

__all__ = [
    "EOT",
    "MIXER_POLICIES",
    "PHASE_LENGTHS",
    "Batch",
    "BatchPlan",
    "Mixer",
    "Phase",
    "PreparedData",
    "Source",
    "TokenSource",
    "batch_seed",
    "build_sources",
    "default_cache_dir",
    "load_override",
    "load_token_file",
    "make_outlier_batch",
    "outlier_generator",
    "parse_source_overrides",
    "prepare_data",
    "tokens_hash",
]
