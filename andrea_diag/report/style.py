"""Shared look of the report's figures: colours per arm, boundaries, thinning, spike markers.

``figures.py`` (training curves) and ``probe_figures.py`` (per-layer, optimizer state, lock-in)
both draw with these, so every chart marks the same boundaries and colours an arm the same way.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from andrea_diag.clip.modes import CLIPPERS
from andrea_diag.config import SOURCE_NAMES
from andrea_diag.report.arms import Arm, boundaries

MAX_POINTS = 2000
# Colour by arm name, so "none" has the same colour in every report and at every size: a clip
# mode's own colour comes from its registration (clip/modes.py), other arms take the palette.
PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
PREFERRED = {name: cls.color for name, cls in CLIPPERS.items()}
DASHES = ["solid", "dash", "dot", "dashdot"]  # one per model size, when sizes are mixed
SOURCE_COLORS = {"repo-docs": "#8c564b", "gutenberg": "#2ca02c", "hermes3-general": "#9467bd"}
LAYOUT = dict(template="plotly_white", hovermode="x unified", margin=dict(l=60, r=20, t=50, b=40))
BOUNDARY_SHAPE = "phase-boundary"
PHASE_SHADE = "phase-shade"


class Style:
    """Colour per arm, dash per size: consistent across every figure of one report.

    An arm name keeps its colour (a clip mode's own, else the palette's next) and a size its
    dash, so ``none`` at two sizes is one colour in two dashes. Two runs of the same arm name
    and size (two cascades, two monitor runs) are told apart by colour: the second takes the
    palette's next free colour. ``color`` maps an arm name to its first run's colour (charts
    grouped by arm name); :meth:`of` is one arm's own.
    """

    def __init__(self, arms: list[Arm]) -> None:
        free = [c for c in PALETTE if c not in PREFERRED.values()] + PALETTE
        self.color: dict[str, str] = {}
        self._of: dict[tuple[str, str], str] = {}
        drawn: set[tuple[str, str]] = set()  # (arm name, size) already given a colour
        for a in arms:
            if a.arm not in self.color:
                c = PREFERRED.get(a.arm) or self._free(free)
                self.color[a.arm] = c
            elif (a.arm, a.size) in drawn:  # the same arm again, from another run
                c = self._free(free)
            else:  # the same arm at another size: its colour, another dash
                c = self.color[a.arm]
            drawn.add((a.arm, a.size))
            self._of.setdefault(_key(a), c)
        sizes = list(dict.fromkeys(a.size for a in arms))
        self.dash = {s: DASHES[i % len(DASHES)] for i, s in enumerate(sizes)}

    def _free(self, free: list[str]) -> str:
        """The next palette colour no arm uses yet (past the palette's end: the next at all)."""
        used = set(self.color.values()) | set(self._of.values())
        pick = next((c for c in free if c not in used), None)
        if pick is None:  # more arms than colours: repeat, in palette order
            pick = PALETTE[len(self._of) % len(PALETTE)]
        else:
            free.remove(pick)
        return pick

    def of(self, arm: Arm) -> str:
        """This arm's colour (its run's, when two runs share the arm name)."""
        return self._of.get(_key(arm)) or self.color.get(arm.arm) or PALETTE[0]

    def line(self, arm: Arm, **kw: object) -> dict:
        return dict(color=self.of(arm), dash=self.dash.get(arm.size, "solid"), **kw)


def _key(arm: Arm) -> tuple[str, str]:
    return (arm.label, arm.dir)


def thin(
    df: pd.DataFrame, keep: set[int] | None = None, max_points: int = MAX_POINTS
) -> pd.DataFrame:
    """Every k-th row plus the rows in ``keep`` (boundary/spike updates), at most ~max_points."""
    if len(df) <= max_points or "update" not in df:
        return df
    stride = math.ceil(len(df) / max_points)
    mask = np.zeros(len(df), dtype=bool)
    mask[::stride] = True
    mask[-1] = True
    if keep:
        mask |= df["update"].isin(keep).to_numpy()
    return df[mask]


def _keep(arm: Arm) -> set[int]:
    ev = set(int(u) for u in arm.events["update"]) if "update" in arm.events else set()
    return ev | set(boundaries(arm.metrics))


def all_boundaries(arms: list[Arm]) -> list[int]:
    """Union over arms (paired arms share one schedule, so this is usually one arm's list)."""
    return sorted(set().union(*(boundaries(a.metrics) for a in arms))) if arms else []


def mark_boundaries(fig: go.Figure, arms: list[Arm]) -> None:
    """One dotted vertical line per phase boundary, spanning every subplot row, and every
    other phase lightly shaded so phases read as bands.

    The shapes are set in one layout update: ``fig.add_shape`` re-validates every existing
    shape on each call, which made a 1,200-update report take tens of seconds."""
    line = dict(color="rgba(120,120,120,0.45)", width=1, dash="dot")
    shapes = [
        dict(
            type="line",
            name=BOUNDARY_SHAPE,
            xref="x",
            yref="paper",
            x0=b - 0.5,  # between the last update of a phase and the first of the next
            x1=b - 0.5,
            y0=0,
            y1=1,
            line=line,
            layer="below",
        )
        for b in all_boundaries(arms)
    ]
    bounds = all_boundaries(arms)
    last = max((int(a.metrics["update"].max()) for a in arms if len(a.metrics)), default=0)
    edges = [b - 0.5 for b in bounds] + [last + 0.5]
    shapes += [
        dict(
            type="rect",
            name=PHASE_SHADE,
            xref="x",
            yref="paper",
            x0=edges[i],
            x1=edges[i + 1],
            y0=0,
            y1=1,
            fillcolor="rgba(120,120,120,0.06)",
            line={"width": 0},
            layer="below",
        )
        for i in range(0, len(edges) - 1, 2)  # phases 2, 4, ...: alternate bands
    ]
    fig.update_layout(shapes=list(fig.layout.shapes) + shapes)


def _has(arm: Arm, col: str) -> bool:
    return col in arm.metrics and arm.metrics[col].notna().any()


def _spike_markers(
    fig: go.Figure, arm: Arm, style: Style, metric: str, row: int | None = None
) -> None:
    ev = arm.events
    if ev.empty or "metric" not in ev:
        return
    sel = ev[ev["metric"] == metric]
    if sel.empty:
        return
    causes = sel["cause"].astype(str) if "cause" in sel else pd.Series("?", index=sel.index)
    trace = go.Scatter(
        x=sel["update"],
        y=sel["value"],
        mode="markers",
        name=f"{arm.label} {metric} spikes",
        marker=dict(symbol="x", size=10, color=style.of(arm), line=dict(width=1)),
        text=[f"update {int(u)}: {c}" for u, c in zip(sel["update"], causes, strict=True)],
        hovertemplate="%{text}<extra></extra>",
    )
    if row is None:
        fig.add_trace(trace)
    else:
        fig.add_trace(trace, row=row, col=1)


def source_names(arms: list[Arm]) -> list[str]:
    """Source names from the w_<source> columns (SOURCE_NAMES when none). Not from loss_*:
    the spike probe also writes ``loss_z``, which is not a source."""
    names = dict.fromkeys(c[2:] for a in arms for c in a.metrics.columns if c.startswith("w_"))
    return list(names) or list(SOURCE_NAMES)
