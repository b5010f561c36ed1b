"""A slow run says so before it starts, then how long it will take once it has measured itself.

    watch = SlowStart.watcher(configs, console)  # cascade.py's run_arms: warns when slow
    train_arm(..., progress=watch(tick, i))      # arm i's progress callback, observed first

Two things are known to be slow on a CPU: a model of the 12m preset or larger (over 100 s an
update measured on two cores) and bf16 autocast (12.6x slower than fp32 there, measured on
the tiny preset; issue 24). Such a run prints one line at the start, then, after
:data:`ETA_AFTER` updates, one line with the seconds per update those updates took (their
``time_s``, measured wall time) and ``about N min for M updates``: the rest of this arm and the
arms after it. Nothing is timed that the run does not already time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.console import Console

from andrea_diag.config import RunConfig
from andrea_diag.device import resolve_device

Tick = Callable[[int, dict[str, Any]], None]  # (update, metrics row): loop.ProgressFn
ETA_AFTER = 3  # updates measured before the ETA line: past the first update's warm-up alone
SLOW_PARAMS = 10_000_000  # the 12m preset (17.5M parameters) and every larger one


def slow_reasons(cfg: RunConfig) -> list[str]:
    """Why ``cfg`` will be slow here (empty: it will not be): a large model or bf16 on CPU."""
    if resolve_device(cfg.device).type != "cpu":
        return []
    reasons = []
    n_params = cfg.model.n_params()
    if n_params >= SLOW_PARAMS and not (cfg.model_factory or cfg.hf_config):
        reasons.append(f"a {cfg.size} model ({n_params / 1e6:.1f}M parameters) on CPU")
    if cfg.precision == "bf16":
        reasons.append("bf16 on CPU (about 12x slower than fp32 there)")
    return reasons


class SlowStart:
    """The start line, then the ETA line once :data:`ETA_AFTER` updates are measured."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seconds: list[float] = []
        self.said = False

    @classmethod
    def check(cls, configs: list[RunConfig], console: Console) -> SlowStart | None:
        """Print the warning and return the clock, or None when the run is not a slow one."""
        reasons = slow_reasons(configs[0])
        if not reasons:
            return None
        console.print(
            f"[yellow]slow run:[/] {' and '.join(reasons)}; an estimate of the time follows "
            f"update {ETA_AFTER}",
            highlight=False,
            soft_wrap=True,
        )
        return cls(console)

    @classmethod
    def watcher(cls, configs: list[RunConfig], console: Console) -> Callable[[Tick, int], Tick]:
        """``watch(tick, i)``: arm ``i``'s progress callback, observed first when the run is
        slow (the warning is printed here, once), else ``tick`` itself."""
        eta = cls.check(configs, console)

        def watch(tick: Tick, i: int) -> Tick:
            if eta is None:
                return tick
            steps, later = configs[i].steps, sum(c.steps for c in configs[i + 1 :])

            def observed(update: int, row: dict[str, Any]) -> None:
                eta.observe(update, row, steps - update + later)
                tick(update, row)

            return observed

        return watch

    def observe(self, update: int, row: dict[str, Any], updates_left: int) -> None:
        """Count one update's wall time; after ETA_AFTER of them, print the ETA once."""
        if self.said:
            return
        t = row.get("time_s")
        if isinstance(t, (int, float)) and math.isfinite(t):
            self.seconds.append(float(t))
        if len(self.seconds) < ETA_AFTER:
            return
        self.said = True
        per = sum(self.seconds) / len(self.seconds)
        minutes = max(1, round(per * updates_left / 60))
        self.console.print(
            f"[yellow]estimate:[/] {per:.2f} s per update over updates {update - ETA_AFTER + 1}"
            f"-{update}: about {minutes} min for {updates_left} updates",
            highlight=False,
            soft_wrap=True,
        )
