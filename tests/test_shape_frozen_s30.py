"""Frozen parameters in a model SpikeMonitor did not build: the head is the last Linear that
trains, and ``model_shape``'s group counts are of the tensors the probes read (those that
require grad), not of every tensor the model holds."""

from __future__ import annotations

from torch import nn

from andrea_diag.probes.shape import layer_groups, model_shape


def _mlp_with_a_frozen_last_linear() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Linear(3, 3))
    for p in model[3].parameters():  # a frozen projection registered last
        p.requires_grad_(False)
    return model


def test_a_frozen_linear_registered_last_is_not_the_head() -> None:
    groups = layer_groups(_mlp_with_a_frozen_last_linear())
    assert groups["2.weight"] == ("head", "head")  # the last Linear that trains
    assert groups["3.weight"][0] != "head"


def test_model_shape_counts_only_the_trained_tensors_per_group() -> None:
    shape = model_shape(_mlp_with_a_frozen_last_linear(), None, 3, None)
    assert sum(shape["layer_groups"].values()) == 4  # two trained Linears, weight and bias
    assert shape["layer_groups"]["head.head"] == 2
    assert "h03.mlp" not in shape["layer_groups"]


def test_a_model_with_nothing_frozen_keeps_its_last_linear_as_the_head() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    assert layer_groups(model)["2.weight"] == ("head", "head")
    assert sum(model_shape(model, None, 3, None)["layer_groups"].values()) == 4
