"""Elastic runs: the world size over the epochs (at each epoch's end; an epoch that had
several sizes is marked) and the resets; no page without an elastic run."""

from __future__ import annotations

from clusterbench.report.context import Context

ORDER = 120


#: The most runs the page draws.
MAX_RUNS = 10


def draw(ctx: Context) -> None:
    runs_df, epochs_df, book = ctx.runs_df, ctx.epochs_df, ctx.book
    elastic = list(runs_df.loc[runs_df["elastic"], "run"])
    if not elastic or "world_size" not in epochs_df.columns:
        return
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
        took = f", {row['reset_seconds']:.1f} s in all" if row["resets"] else ""
        label = f"{name} ({row['resets']} reset(s){took})"
        ax.step(ep["epoch"], ep["world_size"], where="post", color=book.colors[name], label=label)
        if "world_sizes" in ep.columns:
            changed = ep[[isinstance(w, list) and len(w) > 1 for w in ep["world_sizes"]]]
            ax.plot(changed["epoch"], changed["world_size"], "x", color=book.colors[name], ms=12)
    ax.set_xlabel("epoch")
    ax.set_ylabel("ranks (world size)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.xaxis.get_major_locator().set_params(integer=True)  # epochs are whole
    ax.legend(frameon=False)
