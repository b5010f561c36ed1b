"""Stand-in CUDA graphs for the CPU: a capture that runs the step once, a replay that re-runs
it into the captured tensors (tests/test_graphed.py, tests/test_optstate_graph.py), and an
optimizer step whose replay runs the eager step (tests/test_graphed_step.py, test_pipeline.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from andrea_diag.train import graphed


class StandInGraph:
    """Replays the captured step into the captured tensors: grads zeroed in place and
    accumulated where they are, outputs copied into the ones the capture returned."""

    def __init__(self, step: Any, tokens: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        self.step, self.tokens, self.params, self.replays = step, tokens, params, 0
        self.out = step(tokens)  # a real capture records without running; this runs once
        self.grads = [p.grad for p in params]

    def replay(self) -> None:
        """Writes fresh gradients into the captured tensors only, as a real replay does: a
        parameter whose ``.grad`` was pointed elsewhere (or set to None) keeps that."""
        self.replays += 1
        before = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        fresh = self.step(self.tokens)
        for p, g, old in zip(self.params, self.grads, before, strict=True):
            if g is not None:
                g.copy_(p.grad)
            p.grad = old
        self.out.loss.copy_(fresh.loss)
        self.out.example_loss.copy_(fresh.example_loss)


def stand_in_graphs(mp: pytest.MonkeyPatch, params: list) -> dict[str, StandInGraph]:
    """Captures make :class:`StandInGraph` s over ``params``; the last one is ``holder["g"]``."""
    holder: dict[str, StandInGraph] = {}

    def capture(step: Any, static: torch.Tensor) -> tuple[StandInGraph, Any]:
        holder["g"] = StandInGraph(step, static, params)
        return holder["g"], holder["g"].out

    mp.setattr(graphed, "graph_forward_backward", capture)
    return holder


class StandInStepGraph:
    """A capture that records nothing; each replay runs the optimizer's eager step, and first
    checks that it reads what a real graph would: the captured gradient and state tensors, and
    the captured lr (a real replay cannot see a new tensor or a new lr)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.replays = optimizer, 0
        self.seen = self._reads()

    def _reads(self) -> tuple[list, list, list]:
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        state = [self.optimizer.state[p].get(k) for p in params for k in ("exp_avg", "step")]
        return [p.grad for p in params], state, [g["lr"] for g in self.optimizer.param_groups]

    def replay(self) -> None:
        self.replays += 1
        grads, state, lrs = self._reads()
        assert all(a is b for a, b in zip(grads + state, self.seen[0] + self.seen[1], strict=True))
        assert lrs == self.seen[2]
        self.optimizer.step()


class StandInScalarGraph:
    """The probe's arithmetic: computed at the capture, recomputed into its vector at a replay."""

    def __init__(self, compute: Any) -> None:
        self.compute, self.replays, self.fresh = compute, 0, True
        self.out = compute()  # what the capture's first replay would compute, for this call

    def replay(self) -> None:
        self.replays += 1
        if self.fresh:  # the capture's own run was this call's
            self.fresh = False
            return
        flat, _ = self.compute()
        self.out[0].copy_(flat)


def stand_in_scalar_graphs(mp: pytest.MonkeyPatch) -> list[StandInScalarGraph]:
    """The optimizer-state probe's captures make :class:`StandInScalarGraph` s (listed)."""
    from andrea_diag.probes import optstate_graph

    made: list[StandInScalarGraph] = []

    def capture(compute: Any) -> tuple[StandInScalarGraph, Any]:
        made.append(StandInScalarGraph(compute))
        return made[-1], made[-1].out

    mp.setattr(optstate_graph, "capture", capture)
    return made
