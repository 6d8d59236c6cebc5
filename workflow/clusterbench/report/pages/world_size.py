"""Elastic runs: their ranks over time (run.json's timeline: a step at each start and reset;
a dot at each epoch's end; for a run that grows through jobs, its worker jobs' starts and ends
marked), or, for runs recorded before the timeline, over the epochs; no page without an elastic
run."""

from __future__ import annotations

from typing import Any

from clusterbench.report.clock import seconds, timeline
from clusterbench.report.context import Context

ORDER = 120


#: The most runs the page draws.
MAX_RUNS = 10


def draw(ctx: Context) -> None:
    runs_df, epochs_df = ctx.runs_df, ctx.epochs_df
    elastic = list(runs_df.loc[runs_df["elastic"], "run"])
    if not elastic or "world_size" not in epochs_df.columns:
        return
    timed = [name for name in elastic if timeline(ctx.run_data(name).info)]
    if timed:
        over_time(ctx, timed, len(elastic))
    else:
        over_epochs(ctx, elastic)


def label(row: Any) -> str:
    """A run's legend entry: its resets and, when recorded, the device-hours it used against a
    fixed run of max_workers."""
    took = f", {row['reset_seconds']:.1f} s in all" if row["resets"] else ""
    text = f"{row['run']} ({row['resets']} reset(s){took}"
    used, fixed = row.get("device_hours"), row.get("fixed_device_hours")
    if used == used and fixed == fixed and used is not None and fixed:  # not NaN
        text += f"; {used:.2g} of {fixed:.2g} {row['device_hours_unit']}-h, {used / fixed:.0%}"
    return text + ")"


def over_time(ctx: Context, names: list[str], elastic: int) -> None:
    book = ctx.book
    shown = names[:MAX_RUNS]
    fig = book.new(
        "Elastic runs: ranks over time",
        "Ranks (the world size) of each run that trains under Horovod elastic "
        "(min_workers/max_workers) over its training time, from its start: a step where a rank "
        "failed, left or joined; a dot at each epoch's end. A run that grows through worker "
        "jobs (grow: jobs) marks its worker jobs' starts (^) and ends (v). In the legend: the "
        "GPU-hours (CPU-hours on CPUs) the run used, and those a fixed run of its max_workers "
        "would have held over the same time."
        + (f" The first {MAX_RUNS} of {len(names)} runs." if len(names) > MAX_RUNS else "")
        + (
            f" {elastic - len(names)} elastic run(s) recorded no timeline (trained by an "
            "older version): not drawn."
            if elastic > len(names)
            else ""
        ),
        png="elastic",
    )
    ax = fig.add_subplot()
    for name in shown:
        info = ctx.run_data(name).info
        points = timeline(info)
        t0 = seconds(points[0]["time"])
        minutes = [(seconds(p["time"]) - t0) / 60 for p in points]
        sizes = [int(p["size"]) for p in points]
        color = book.colors[name]
        row = ctx.runs_df.loc[ctx.runs_df["run"] == name].iloc[0]
        ax.step(minutes, sizes, where="post", color=color, label=label(row))
        ends = ctx.epochs_df[ctx.epochs_df["run"] == name]
        if "time" in ends.columns:
            at = [(seconds(t) - t0) / 60 for t in ends["time"] if seconds(t) is not None]
            ax.plot(at, ends["world_size"].iloc[: len(at)], ".", color=color, ms=4)
        for job in (info["world"]["elastic"].get("worker_jobs") or [])[:200]:
            for key, mark in (("start", "^"), ("end", "v")):
                when = seconds(job.get(key))
                if when is not None and when >= t0:
                    ax.plot((when - t0) / 60, max(sizes) + 0.15, mark, color=color, ms=5)
    ax.set_xlabel("minutes since the run started")
    ax.set_ylabel("ranks (world size)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(frameon=False, fontsize="small")


def over_epochs(ctx: Context, elastic: list[str]) -> None:
    """The world size at each epoch's end (runs.json without a timeline)."""
    runs_df, epochs_df, book = ctx.runs_df, ctx.epochs_df, ctx.book
    fig = book.new(
        "Elastic runs: world size over the epochs",
        "Ranks at the end of each epoch of the runs that train under Horovod elastic "
        "(min_workers/max_workers); a cross marks an epoch during which the world changed "
        "(a rank failed or joined), with the reset's time in the legend."
        + (
            f" The first {MAX_RUNS} of {len(elastic)} elastic runs."
            if len(elastic) > MAX_RUNS
            else ""
        ),
        png="elastic",
    )
    ax = fig.add_subplot()
    for name in elastic[:MAX_RUNS]:
        ep = epochs_df[epochs_df["run"] == name]
        row = runs_df.loc[runs_df["run"] == name].iloc[0]
        ax.step(
            ep["epoch"], ep["world_size"], where="post", color=book.colors[name], label=label(row)
        )
        if "world_sizes" in ep.columns:
            changed = ep[[isinstance(w, list) and len(w) > 1 for w in ep["world_sizes"]]]
            ax.plot(changed["epoch"], changed["world_size"], "x", color=book.colors[name], ms=12)
    ax.set_xlabel("epoch")
    ax.set_ylabel("ranks (world size)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.xaxis.get_major_locator().set_params(integer=True)  # epochs are whole
    ax.legend(frameon=False)
