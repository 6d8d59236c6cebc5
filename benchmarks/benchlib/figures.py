"""Figures: ratios of rows' median images/s measured in the same round; the median over the
rounds is reported, with every round's value beside it."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from benchlib.rows import Runner, Spec


@dataclasses.dataclass
class Figure:
    name: str
    what: str
    goal: float | None  # None: reported, no goal
    value: float | None = None
    detail: str = ""
    rows: list[str] = dataclasses.field(default_factory=list)
    #: The goal is a most (seconds added), not a least (a ratio).
    at_most: bool = False

    @property
    def met(self) -> str:
        if self.value is None or self.goal is None:
            return "n/a"
        return (
            "yes"
            if (self.value <= self.goal if self.at_most else self.value >= self.goal)
            else "no"
        )

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "met": self.met}


def rate(runner: Runner, spec: Spec, key: str = "images_per_second") -> tuple[float | None, str]:
    """The row's median ``key`` in the current round, or None and why."""
    row = runner.row(spec)
    value = None if row is None else row.median(key)
    if value is None:
        return None, f"{spec.case}: {spec.name}: {'failed' if row else 'not run'}"
    return value, ""


def ratio_figure(
    runner: Runner,
    name: str,
    what: str,
    goal: float | None,
    num: Spec,
    den: Spec,
    key: str = "images_per_second",
) -> Figure:
    """``num``'s median ``key`` over ``den``'s, both of the current round."""
    fig = Figure(name, what, goal, rows=[f"{s.case}: {s.name}" for s in (num, den)])
    a, why_a = rate(runner, num, key)
    b, why_b = rate(runner, den, key)
    if a is None or b is None:
        fig.detail = "; ".join(w for w in (why_a, why_b) if w)
    else:
        fig.value = a / b
        fig.detail = f"{a:.0f} / {b:.0f} {key.replace('_per_second', '/s')}"
    return fig


def share_figure(runner: Runner, name: str, what: str, spec: Spec, phase: str = "data") -> Figure:
    """The share of ``spec``'s step time spent in ``phase`` (the trainer's step-time breakdown,
    ``metrics.jsonl``'s ``step_seconds``: the mean over the ranks), the median over its
    measured epochs; reported, no goal."""
    fig = Figure(name, what, None, rows=[f"{spec.case}: {spec.name}"])
    row = runner.row(spec)
    shares = []
    for record in row.epochs if row is not None else []:
        steps = record.get("step_seconds")
        if record["epoch"] in row.measured_epochs and steps:
            total = sum(steps[p]["mean"] for p in ("data", "compute", "comm", "optimizer"))
            shares.append(steps[phase]["mean"] / total)
    if not shares:
        fig.detail = f"{spec.case}: {spec.name}: {'no step_seconds' if row else 'not run'}"
        return fig
    fig.value = statistics.median(shares)
    fig.detail = f"{100 * fig.value:.1f} % of the step time waiting for {phase}"
    return fig


def formula_figure(
    runner: Runner,
    name: str,
    what: str,
    goal: float | None,
    specs: Sequence[Spec],
    formula: Callable[..., tuple[float, str]],
) -> Figure:
    """A figure computed by ``formula(*rates)`` from the rows ``specs`` of the round."""
    fig = Figure(name, what, goal, rows=[f"{s.case}: {s.name}" for s in specs])
    rates = [rate(runner, s) for s in specs]
    if any(r is None for r, _ in rates):
        fig.detail = "; ".join(w for r, w in rates if r is None)
        return fig
    fig.value, fig.detail = formula(*(r for r, _ in rates))
    return fig


def combine_rounds(per_round: Sequence[Figure]) -> list[Figure]:
    """One figure per name: the median of its per-round values (rounds that failed left out),
    every round's value and their spread (lowest-highest) in its detail."""
    by_name: dict[str, list[Figure]] = {}
    for fig in per_round:
        by_name.setdefault(fig.name, []).append(fig)
    out = []
    for figs in by_name.values():
        values = [f.value for f in figs if f.value is not None]
        fig = dataclasses.replace(figs[0], value=statistics.median(values) if values else None)
        shown = ", ".join("failed" if f.value is None else f"{f.value:.3g}" for f in figs)
        spread = f" (spread {min(values):.3g}-{max(values):.3g})" if len(values) > 1 else ""
        fig.detail = f"rounds: {shown}{spread}" + (
            f"; round 1: {figs[0].detail}" if len(figs) > 1 else ""
        )
        if len(figs) == 1:
            fig.detail = figs[0].detail
        out.append(fig)
    return out
