"""One clock: every elastic run of the workflow on one wall-clock axis (UTC), the runs' ranks
stacked so that the cluster's total can be read, their worker jobs' starts, ends and
take-backs and their priority changes marked, and the device-hours each used against a
fixed allocation of its ``max_workers``. A fixed run whose epochs overlap the elastic runs'
time is drawn too, as a constant band: it held its ranks on the same cluster, and the total
would be wrong without it. No page without an elastic run that recorded its timeline.
The computing is :mod:`clusterbench.report.clock` (pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from clusterbench.report import clock
from clusterbench.report.context import Context
from clusterbench.report.text import fmt_hours

ORDER = 121  # right after each run's own ranks over time (world_size, 120)

#: The most runs the page draws (the first to start).
MAX_RUNS = 10
#: The most marks drawn per run.
MAX_MARKS = 200
#: The most characters of a run's name drawn.
NAME_WIDTH = 28
#: The most dotted lines (take-backs) drawn through the stack: more would hide it.
MAX_LINES = 12
#: The characters of one row of the legend (the page's width, at its font size).
LEGEND_WIDTH = 140
#: How each kind of mark is drawn: marker, size, its legend entry.
MARKERS = {
    clock.STARTED: ("^", 7, "worker job started"),
    clock.ENDED: ("v", 7, "worker job ended"),
    clock.TAKEN_BACK: ("X", 10, "worker job taken back"),
    clock.PRIORITY: ("D", 7, "priority changed"),
}


def draw(ctx: Context) -> None:
    from matplotlib.transforms import blended_transform_factory

    lanes, fixed, elastic = runs_on_the_clock(ctx)
    if not lanes:
        return
    shown = dict(list(lanes.items())[:MAX_RUNS])
    rows = ctx.runs_df.set_index("run").loc[list(shown)].reset_index().to_dict("records")
    each, totals = clock.device_hours(rows)
    fig = ctx.book.new(
        "One clock: every elastic run's ranks over time",
        CAPTION,
        png="one_clock",
        note=note(len(lanes), len(shown), elastic - (len(lanes) - len(fixed))),
    )
    longest = max(len(run_label(name, fixed)) for name in shown)
    columns = max(2, min(6, LEGEND_WIDTH // (max(longest, 20) + 8)))
    legend_rows = -(-(len(shown) + len(MARKERS) + 1) // columns)
    grid = fig.add_gridspec(
        3, 2, width_ratios=(2.6, 1), height_ratios=(0.6 * legend_rows, min(1 + len(shown), 6), 9)
    )
    stack_ax = fig.add_subplot(grid[2, 0])
    marks_ax = fig.add_subplot(grid[1, 0], sharex=stack_ax)
    handles = draw_stack(ctx, stack_ax, shown, fixed)
    handles += draw_marks(ctx, marks_ax, stack_ax, shown, fixed)
    legend_ax = fig.add_subplot(grid[0, :])
    legend_ax.axis("off")
    legend = legend_ax.legend(
        handles=handles, loc="upper left", ncols=columns, frameon=False, fontsize="small",
        borderaxespad=0, columnspacing=1.5, handletextpad=0.4, bbox_to_anchor=(0.03, 1),
        bbox_transform=blended_transform_factory(fig.transFigure, legend_ax.transAxes),
    )  # fmt: skip
    legend.set_in_layout(False)  # in its own row, from the page's margin: as wide as the page
    draw_hours(ctx, fig.add_subplot(grid[1:, 1]), each, totals)
    stack_ax.set_xlabel(f"wall-clock time (UTC), from {utc_text(first_start(shown))}")


CAPTION = (
    "Every elastic run on one wall-clock axis (UTC), its ranks (GPUs; on CPUs, ranks) stacked "
    "in the order the runs started: the black edge is what they held together. A fixed run "
    "that overlaps them is a hatched band (its first epoch's start to its last epoch's end). "
    "Above: each run's worker jobs started, ended or taken back by the scheduler (a dotted "
    "line where few), and its priority changes. Right: the GPU-hours (CPU-hours on CPUs) each "
    "elastic run used, within a fixed allocation of its max_workers over the same time."
)


def note(runs: int, shown: int, untimed: int) -> str | None:
    """What the page leaves out: runs beyond :data:`MAX_RUNS`, elastic runs without a
    timeline."""
    notes = []
    if runs > shown:
        notes.append(
            f"The first {shown} of {runs} runs to start are drawn: the total leaves the others out."
        )
    if untimed:
        notes.append(
            f"{untimed} elastic run(s) recorded no timeline (trained by an older version): "
            "not drawn."
        )
    return " ".join(notes) or None


def runs_on_the_clock(ctx: Context) -> tuple[dict[str, clock.Steps], list[str], int]:
    """The runs to draw, by their start (each one's steps), the fixed ones among them, and how
    many elastic runs there are."""
    runs_df, epochs_df = ctx.runs_df, ctx.epochs_df
    lanes: dict[str, clock.Steps] = {}
    names = list(runs_df.loc[runs_df["elastic"], "run"])
    for name in names:
        points = clock.timeline(ctx.run_data(name).info)
        if points:
            lanes[name] = clock.elastic_steps(points, list(epochs_of(epochs_df, name, "time")))
    if not lanes:
        return {}, [], len(names)
    start = min(steps[0][0] for steps in lanes.values())
    end = max(steps[-1][0] for steps in lanes.values())
    fixed = []
    for row in runs_df.loc[~runs_df["elastic"]].itertuples():
        records = epochs_of(epochs_df, row.run).to_dict("records")
        steps = clock.fixed_steps(records, int(row.workers))
        if clock.overlaps(steps, start, end):
            lanes[row.run] = steps
            fixed.append(row.run)
    by_start = dict(sorted(lanes.items(), key=lambda item: item[1][0][0]))
    return by_start, fixed, len(names)


def epochs_of(epochs_df: Any, name: str, column: str | None = None) -> Any:
    """The epochs of run ``name`` (one column of them; an empty list without it)."""
    mine = epochs_df[epochs_df["run"] == name]
    if column is None:
        return mine
    return mine[column] if column in mine.columns else []


def when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def mdate(seconds: float) -> float:
    """``seconds`` since the epoch as matplotlib's date number (an axis limit)."""
    import matplotlib.dates as mdates

    return mdates.date2num(when(seconds))


def utc_text(seconds: float) -> str:
    return when(seconds).strftime("%Y-%m-%d %H:%M:%S UTC")


def first_start(lanes: dict[str, clock.Steps]) -> float:
    return min(steps[0][0] for steps in lanes.values())


def draw_stack(ctx: Context, ax: Any, lanes: dict[str, clock.Steps], fixed: list[str]) -> list:
    """The runs' ranks stacked over time, the total's edge in black; returns their legend
    entries."""
    import matplotlib.dates as mdates

    times, layers = clock.stacked(lanes)
    at = [when(t) for t in times]
    colors = [ctx.book.colors[name] for name in lanes]
    areas = ax.stackplot(
        at, *layers.values(), step="post", colors=colors, alpha=0.85, edgecolor="white", lw=0.5
    )
    for area, name in zip(areas, lanes, strict=True):
        area.set_label(run_label(name, fixed))
        if name in fixed:
            area.set_hatch("//")
    total = [sum(sizes) for sizes in zip(*layers.values(), strict=True)]
    (edge,) = ax.step(at, total, where="post", color="black", lw=1.2, label="all runs together")
    ax.set_ylim(0, max(total) + 0.5)
    pad = (times[-1] - times[0]) / 50 or 60.0  # the first and last marks drawn whole
    ax.set_xlim(when(times[0] - pad), when(times[-1] + pad))
    ax.set_ylabel("ranks held (GPUs, or a rank's CPUs)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    locator = mdates.AutoDateLocator(tz=dt.UTC)
    ax.xaxis.set_major_locator(locator)
    ticks = mdates.ConciseDateFormatter(locator, tz=dt.UTC, show_offset=False)
    ticks.formats[5] = ticks.zero_formats[5] = "%H:%M:%S"  # ticks seconds apart: all of it
    ax.xaxis.set_major_formatter(ticks)
    return [*areas, edge]


def short(name: str, width: int = NAME_WIDTH) -> str:
    """A run's name in at most ``width`` characters: its start and its end, which tell runs
    of one experiment apart ('resnet50-imag…-run-7')."""
    if len(name) <= width:
        return name
    head = (width - 1) // 2
    return name[:head] + "\u2026" + name[len(name) - (width - 1 - head) :]


def run_label(name: str, fixed: list[str]) -> str:
    return short(name) + (" (fixed)" if name in fixed else "")


def draw_marks(
    ctx: Context, ax: Any, stack_ax: Any, lanes: dict[str, clock.Steps], fixed: list[str]
) -> list:
    """One row per run: its worker jobs' starts, ends and take-backs, its priority changes
    (with their from and to); a dotted line through the stack at each take-back, where there
    are at most :data:`MAX_LINES`. Returns the marks' legend entries."""
    names = list(lanes)
    found = {name: clock.marks(ctx.run_data(name).info)[:MAX_MARKS] for name in names}
    lines = sum(m.kind == clock.TAKEN_BACK for marks in found.values() for m in marks)
    for row, name in enumerate(names):
        color = ctx.book.colors[name]
        for k, mark in enumerate(found[name]):
            marker, size, _ = MARKERS[mark.kind]
            ax.plot(when(mark.time), row, marker, ms=size, color=color, mec="black", mew=0.6)
            if mark.text:
                ax.annotate(
                    mark.text, (when(mark.time), row), xytext=(6, 6 if k % 2 else -6),
                    textcoords="offset points", va="center", fontsize="small",
                )  # fmt: skip
            if mark.kind == clock.TAKEN_BACK and lines <= MAX_LINES:
                stack_ax.axvline(when(mark.time), color=color, ls=":", lw=1.4)
    stamps = [m.time for marks in found.values() for m in marks]
    if stamps:  # a worker job may start before its run's ranks train: its mark drawn whole
        low, high = stack_ax.get_xlim()
        pad = (high - low) / 50
        low, high = min(low, mdate(min(stamps)) - pad), max(high, mdate(max(stamps)) + pad)
        stack_ax.set_xlim(low, high)
    ax.set_yticks(range(len(names)), [run_label(n, fixed) for n in names], fontsize="small")
    for tick, name in zip(ax.get_yticklabels(), names, strict=True):
        tick.set_color(ctx.book.colors[name])
    ax.set_ylim(len(names) - 0.4, -0.6)
    ax.tick_params(axis="x", labelbottom=False)
    ax.grid(axis="y", visible=False)
    return [
        ax.plot([], [], m, ms=s, color="white", mec="black", label=text)[0]
        for m, s, text in MARKERS.values()
    ]


def draw_hours(
    ctx: Context, ax: Any, each: list[clock.Hours], totals: dict[str, clock.Hours]
) -> None:
    """A bar pair per elastic run and, for several, per unit's total: the device-hours used
    (filled) within those a fixed allocation of max_workers would have held (outlined), in
    figures under each pair."""
    if not each:
        ax.axis("off")
        ax.text(0, 0.5, "No device-hours recorded.", fontsize="small", transform=ax.transAxes)
        return
    totals = totals if len(each) > 1 else {}  # one run's total is the run
    bars = [*each, *totals.values()]
    colors = [ctx.book.colors[h.run] for h in each] + ["0.3"] * len(totals)
    names = [short(h.run, 20) for h in each] + [f"all ({h.unit})" for h in totals.values()]
    rows = range(len(bars))
    ax.barh(rows, [h.fixed for h in bars], 0.45, color="none", edgecolor=colors, lw=1.2)
    ax.barh(rows, [h.used for h in bars], 0.45, color=colors)
    for row, h in zip(rows, bars, strict=True):
        share = f", {h.used / h.fixed:.0%}" if h.fixed else ""
        text = f"{fmt_hours(h.used)} of {fmt_hours(h.fixed)} {h.unit}-h{share}"
        ax.annotate(
            text, (0, row + 0.25), xytext=(2, -2), textcoords="offset points", va="top",
            fontsize="small",
        )  # fmt: skip
    ax.set_yticks(rows, names, fontsize="small")
    for tick, color in zip(ax.get_yticklabels(), colors, strict=True):
        tick.set_color(color)
    ax.set_ylim(len(bars) - 0.3, -0.5)
    ax.grid(axis="y", visible=False)
    units = sorted({h.unit for h in each})
    ax.set_xlabel(f"{units[0]}-hours" if len(units) == 1 else "device-hours (each row's unit)")
    ax.set_title(
        "used (filled), and what a fixed\nmax_workers would hold (outline)", fontsize="small"
    )
