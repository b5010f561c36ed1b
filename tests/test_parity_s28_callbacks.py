"""Parity review (s28): what the Hugging Face callback records of the Trainer's clipping.

transformers' ``Trainer`` clips when ``args.max_grad_norm > 0`` (``_inner_training_loop``), so a
NaN threshold never clips; the callback's ``config.json`` said ``clip: global`` for it, a clip
the Trainer never ran. (Lightning clips unless ``gradient_clip_val <= 0``: a NaN there does
clip, every gradient becoming NaN, and is still recorded as a global clip.)

    pytest tests/test_parity_s28_callbacks.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch

from andrea_diag.integrations.settings import hf_settings

# max_grad_norm -> (clip, max_norm) recorded; inf measures and never clips, as the Trainer's
# unclipped path does, and is recorded as the toolkit records its own global clip at inf
CASES: list[tuple[Any, str, Any]] = [
    (math.nan, "none", None),
    (0.0, "none", None),
    (-1.0, "none", None),
    (None, "none", None),
    (1.0, "global", 1.0),
    (math.inf, "global", math.inf),
]


def test_hf_settings_record_a_clip_only_where_the_trainer_clips() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    for value, clip, max_norm in CASES:
        trainer_clips = value is not None and value > 0  # the Trainer's own condition
        assert trainer_clips == (clip == "global"), value
        args = SimpleNamespace(max_grad_norm=value, learning_rate=1e-3,
                               per_device_train_batch_size=2)  # fmt: skip
        got = hf_settings(args, optimizer, model)
        assert (got["clip"], got["max_norm"]) == (clip, max_norm), value
        raw = got["framework_settings"]["max_grad_norm"]  # the Trainer's own value, as given
        assert raw is value, value
