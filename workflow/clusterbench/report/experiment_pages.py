"""The report's pages for the experiment designs: the results sorted on validation, the skipped
runs, execution environments (time per epoch, epochs reached, what was skipped), sweeps
(heatmaps over each pair of swept keys, :mod:`clusterbench.report.sweeps`), repeats (mean ± sd
over seeds) and elastic runs (world size over the epochs).

Each page appears only when the runs have what it shows; every one handles any number of runs,
points, environments and sites (long lists are cut to what a page holds, and the page says so);
a chart with nothing to draw says why in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.experiments import format_value
from clusterbench.report import sweeps
from clusterbench.report.book import Book
from clusterbench.report.charts import MAX_BARS, log_ticks, set_category_ticks
from clusterbench.report.describe import point_label
from clusterbench.report.table_pages import (
    TABLE_ROWS_PER_PAGE,
    cell_text,
    chunk_rows,
    draw_table,
    table_budget,
)
from clusterbench.report.tables import (
    best_run,
    environment_table,
    point_table,
    skipped_table,
    swept_keys,
)
from clusterbench.report.text import fmt_pct, fmt_seconds_sd, plural, wrap_text


def results_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    """Every run, best first by validation accuracy, with what it is (experiment, environment,
    swept values), its validation and test accuracy and its time."""
    columns = [
        ("#", 0.03, True),
        ("Run", 0.24, False),
        ("Experiment /\nenvironment", 0.1, False),
        ("Swept values", 0.2, False),
        ("Workers\n(nodes)", 0.065, True),
        ("Epochs", 0.05, True),
        ("Validation\naccuracy", 0.075, True),
        ("Test\naccuracy", 0.065, True),
        ("Time per epoch\n(mean \u00b1 sd)", 0.11, True),
        ("Images/s", 0.065, True),
    ]
    rows = []
    for rank, r in enumerate(runs_df.itertuples(index=False), start=1):
        origin = "\n".join(x for x in (r.experiment, r.environment) if x) or "by hand"
        rows.append(
            [
                str(rank),
                cell_text(r.run, 0.24),
                origin,
                cell_text(point_label(r.point), 0.2) or "-",
                f"{r.workers} ({r.nodes})",
                str(r.epochs),
                fmt_pct(r.final_val_accuracy),
                fmt_pct(r.accuracy),
                fmt_seconds_sd(r.mean_epoch_seconds, r.std_epoch_seconds)
                if r.timed_epochs
                else "n/a",
                f"{r.images_per_second:,.0f}" if r.timed_epochs else "n/a",
            ]
        )
    header = [c[0] for c in columns]
    chunks = chunk_rows(rows, table_budget(header), TABLE_ROWS_PER_PAGE)
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            "Results, best first" + suffix,
            "Every run sorted by its final validation accuracy (then validation loss): the best "
            "run (highlighted) is chosen on validation, never on the test split, and is kept in "
            "results/best/. Test accuracy is the evaluation's, on data no choice has seen.",
            layout=None,
        )

        def style(row: int, col: int, page_no: int = page_no) -> tuple[str, bool]:
            if page_no == 1 and row == 0:
                return "#d4ecd0", True
            return ("#eef1f6" if row % 2 == 0 else "white"), False

        draw_table(fig, columns, header, chunk, style)


def skipped_pages(pages: Book, skipped: Sequence[dict[str, Any]]) -> None:
    """Every skipped run (hand-written, a sweep point, an environment) with its reason; no
    page when none was skipped."""
    table = skipped_table(skipped)
    if table.empty:
        return
    sites = bool(table["site"].str.len().any())
    widths = (0.22, 0.1, 0.12, 0.14, 0.42) if sites else (0.24, 0, 0.12, 0.14, 0.5)
    columns = [("Run", widths[0], False)]
    columns += [("Site", widths[1], False)] if sites else []
    columns += [
        ("Experiment /\nenvironment", widths[2], False),
        ("Swept values", widths[3], False),
        ("Why it was skipped", widths[4], False),
    ]
    rows = []
    for r in table.itertuples(index=False):
        origin = "\n".join(x for x in (r.experiment, r.environment) if x) or "by hand"
        rows.append(
            [cell_text(r.run, widths[0])]
            + ([cell_text(r.site, widths[1])] if sites else [])
            + [
                cell_text(origin, widths[2]),
                cell_text(r.point, widths[3]) or "-",
                cell_text(r.reason, widths[4], max_lines=8),  # the whole reason, as a rule
            ]
        )
    header = [c[0] for c in columns]
    chunks = chunk_rows(rows, table_budget(header), TABLE_ROWS_PER_PAGE)
    for page_no, chunk in enumerate(chunks, start=1):
        suffix = f" ({page_no} of {len(chunks)})" if len(chunks) > 1 else ""
        fig = pages.new(
            f"Skipped runs: {len(table)}" + suffix,
            "Runs the workflow left out where it ran, before any job: the machine or cluster "
            "could not offer what they ask for (cores, GPUs, nodes, a queue) and the run may be "
            "skipped there (on_unavailable). They appear on no other page but the execution "
            "environments'; skipped.csv lists them too.",
            layout=None,
        )
        draw_table(
            fig,
            columns,
            header,
            chunk,
            lambda row, col: ("#eef1f6" if row % 2 == 0 else "white", False),
        )


def _env_rows(runs_df: pd.DataFrame, exp: str, envs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The environment table's rows of ``exp`` to draw: with a matrix too, those at the best
    run's swept values (named in the text returned)."""
    rows = envs[envs["experiment"] == exp]
    if rows["point"].nunique() <= 1:
        return rows, ""
    ran = runs_df[(runs_df["experiment"] == exp) & (runs_df["environment"] != "")]
    best = best_run(ran)
    return rows[rows["point"] == best["point"]], point_label(best["point"])


def _sd_words(over: set[str]) -> str:
    if over == {"repeats"}:
        return "whiskers: sd over the repeats (the runs with other seeds)"
    if over == {"epochs"}:
        return "whiskers: sd over the timed epochs of its one run"
    return (
        "whiskers: sd over the repeats, or over the timed epochs where an environment ran "
        "once (each bar's label says which)"
    )


def environment_pages(
    pages: Book, runs_df: pd.DataFrame, skipped: Sequence[dict[str, Any]]
) -> None:
    """Per experiment with environments: time per epoch by environment (and site, where
    several; log-scale bars, mean over the repeats, the sd over the repeats as whiskers, or
    over the epochs of a single run, epochs reached printed), the skipped environments beside.
    With a matrix too, the environments are compared at the best run's swept values."""
    envs = environment_table(runs_df)
    skipped_envs = [s for s in skipped if s.get("environment")]
    experiments = list(
        dict.fromkeys([*envs["experiment"], *(s.get("experiment") or "" for s in skipped_envs)])
    )
    warmup = pages.params.timing_warmup_epochs
    for exp in experiments:
        rows, held = _env_rows(runs_df, exp, envs)
        part = rows.head(MAX_BARS)
        cut = ""
        if len(rows) > len(part):
            cut = f" The first {len(part)} of {len(rows)} environments."
        gone = [s for s in skipped_envs if (s.get("experiment") or "") == exp]
        sites = rows["site"].nunique() > 1
        caption = (
            "The same training in each environment (workers x nodes x GPUs per node)"
            + (", on each site" if sites else "")
            + ": mean time per epoch over its repeats, on a log scale ("
            + _sd_words(set(part["sd_over"]))
            + "), and the epochs each reached"
            + (" in its time box" if part["time_boxed"].any() else "")
            + "."
            + (f" All at the best run's swept values ({held})." if held else "")
            + cut
            + " Environments skipped where they were to run are listed beside, with the reason."
        )
        fig = pages.new(f"Execution environments: {exp}", caption, png=f"environments-{exp}")
        grid = fig.add_gridspec(1, 2, width_ratios=(1.7, 1))
        ax = fig.add_subplot(grid[0, 0])
        side = fig.add_subplot(grid[0, 1])
        side.set_axis_off()
        values = part["epoch_seconds"].to_numpy(dtype=float)
        finite = values[np.isfinite(values) & (values > 0)]
        if part.empty:
            pages.note(ax, "No environment of this experiment ran here.")
        elif not finite.size:
            pages.note(
                ax,
                "No time per epoch: no run of these environments has an epoch\nafter the "
                f"{plural(warmup, 'warm-up epoch')}. Epochs reached: "
                + ", ".join(f"{r.environment} {r.epochs:.3g}" for r in part.itertuples()),
            )
        else:
            _environment_bars(pages, ax, part, values, finite, sites)
        lines = ["Skipped here:"] if gone else ["Nothing skipped."]
        budget = 30  # lines the panel holds
        for n, s in enumerate(gone):
            reason = wrap_text(str(s.get("reason")), 44) or [""]
            entry = [f"\u2022 {s.get('environment')} ({s.get('run')}):"]
            entry += [f"   {w}" for w in reason[:8]]
            if len(lines) + len(entry) > budget:
                lines.append(f"and {len(gone) - n} more (see the skipped runs page)")
                break
            lines += entry
        side.text(0.0, 1.0, "\n".join(lines), va="top", fontsize=9.5, transform=side.transAxes)


def _environment_bars(
    pages: Book,
    ax: Any,
    part: pd.DataFrame,
    values: np.ndarray,
    finite: np.ndarray,
    sites: bool,
) -> None:
    names = list(dict.fromkeys(part["environment"]))
    palette = dict(zip(names, pages.sns.color_palette("tab10", len(names)), strict=True))
    labels = []
    for r in part.itertuples(index=False):
        spread = (
            f"{plural(r.repeats, 'repeat')}" if r.sd_over == "repeats" else "1 run: sd over epochs"
        )
        labels.append(
            (f"{r.site}: " if sites else "")
            + f"{r.environment}\n{r.workers} worker(s), {r.nodes} node(s), "
            f"{r.gpus_per_node} GPU/node\n{spread}"
        )
    y = np.arange(len(part))
    sd = np.nan_to_num(part["epoch_seconds_sd"].to_numpy(dtype=float))
    low = np.minimum(sd, np.nan_to_num(values) * 0.9)  # a log axis has no room below 0
    ax.barh(y, values, xerr=[low, sd], color=[palette[e] for e in part["environment"]], capsize=3)
    ax.set_xscale("log")
    log_ticks(ax.xaxis, float(finite.min()), float(finite.max()))
    for yi, (v, s, r) in enumerate(zip(values, sd, part.itertuples(index=False), strict=True)):
        text = f" {v:.3g} s" + (f" \u00b1 {s:.2g}" if s else "") + f", {r.epochs:.3g} epochs"
        if not np.isfinite(v):
            text = f" no timed epoch, {r.epochs:.3g} epochs"
            v, s = finite.min(), 0.0
        ax.text((v + s) * 1.05, yi, text, va="center", fontsize=9)
    ax.set_xlim(finite.min() / 2, finite.max() * 8)
    ax.set_xlabel("seconds per epoch (log scale)")
    set_category_ticks(ax, labels, width=40)


def sweep_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    """Per experiment with a matrix: validation accuracy and time per epoch over each pair of
    swept keys (heatmaps, the other dimensions held at the best run's values, the best cell
    outlined; at most :data:`sweeps.MAX_PAIRS` pairs) or over the one swept key (bars)."""
    for exp, keys in swept_keys(runs_df).items():
        table = point_table(runs_df, exp)
        varying = sweeps.varying_keys(table, keys)
        if len(varying) >= 2:
            _heatmaps(pages, runs_df, exp, table)
        elif varying:
            _one_key(pages, exp, varying[0], table)


def _heatmaps(pages: Book, runs_df: pd.DataFrame, exp: str, table: pd.DataFrame) -> None:
    every = sweeps.pairs(runs_df, exp, table)
    drawn = every[: sweeps.MAX_PAIRS]
    left = every[sweeps.MAX_PAIRS :]
    note = None
    if left:
        note = (
            f"{len(every)} pairs of swept keys; drawn: the first {len(drawn)}; left out: "
            + ", ".join(f"{p.rows} x {p.cols}" for p in left)
            + " (every point is in results.csv)."
        )
    repeats = int(table["repeats"].max())
    warmup = pages.params.timing_warmup_epochs
    for i, pair in enumerate(drawn):
        acc = sweeps.grid(table, pair, "val_accuracy")
        sec = sweeps.grid(table, pair, "epoch_seconds")
        best = sweeps.best_cell(acc)
        blanks = []
        if acc.isna().any().any():
            blanks.append("blank: no run there at the held values (not in the sweep, or skipped)")
        if (sec.isna() & acc.notna()).any().any():
            blanks.append(f"no time: no epoch after the {plural(warmup, 'warm-up epoch')}")
        held = sweeps.held_text(pair.held)
        caption = (
            f"Final validation accuracy (left) and mean time per epoch (right) over {pair.rows} "
            f"x {pair.cols}"
            + (f", the other dimensions held at the best run's values: {held}" if held else "")
            + (f"; mean over up to {repeats} repeats" if repeats > 1 else "")
            + ". The cell with the highest validation accuracy is outlined"
            + (f" ({'; '.join(blanks)})" if blanks else "")
            + "."
        )
        suffix = f" ({i + 1} of {len(drawn)})" if len(drawn) > 1 else ""
        fig = pages.new(
            f"Sweep: {exp}: {pair.rows} x {pair.cols}" + suffix,
            caption,
            png=f"sweep-{exp}" if len(every) == 1 else f"sweep-{exp}-{pair.rows}-x-{pair.cols}",
            note=note if i == 0 else None,
        )
        axes = fig.subplots(1, 2)
        cells = acc.size
        font = 10 if cells <= 36 else 8 if cells <= 100 else 6.5 if cells <= 196 else 0
        for ax, data, fmt, cmap, title, empty in (
            (axes[0], acc * 100, ".1f", "viridis", "validation accuracy (%)", "No accuracy."),
            (
                axes[1],
                sec,
                ".3g",
                "rocket_r",
                "time per epoch (s)",
                f"No time per epoch: no run here has an epoch\nafter the "
                f"{plural(warmup, 'warm-up epoch')} (time box or epochs too short).",
            ),
        ):
            if data.isna().all().all():
                pages.note(ax, empty)
                continue
            pages.sns.heatmap(
                data,
                ax=ax,
                annot=bool(font),
                annot_kws={"fontsize": font} if font else None,
                fmt=fmt,
                cmap=cmap,
                linewidths=0.5,
                linecolor="white",
            )
            if best is not None:
                ax.add_patch(_outline(best[1], best[0]))
            ax.set_title(title)
            ax.set_xlabel(pair.cols)
            ax.set_ylabel(pair.rows)
            ax.tick_params(axis="y", rotation=0)
            long = sum(len(str(c)) for c in data.columns) > 45
            ax.tick_params(axis="x", rotation=45 if long else 0)


def _outline(x: int, y: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, fill=False, edgecolor="red", lw=3)


def _cap(table: pd.DataFrame, what: str) -> tuple[pd.DataFrame, str]:
    """At most :data:`MAX_BARS` rows of a point table: all of them, or the best on mean
    validation accuracy (in their order), and the sentence that says so."""
    if len(table) <= MAX_BARS:
        return table, ""
    best = table["val_accuracy"].nlargest(MAX_BARS).index
    shown = table.loc[sorted(best)]
    return shown, f" Shown: the {MAX_BARS} best of {len(table)} {what} on mean validation accuracy."


def _no_time(pages: Book, ax: Any) -> None:
    warmup = pages.params.timing_warmup_epochs
    pages.note(
        ax,
        "No time per epoch: no run here has\nan epoch after the "
        f"{plural(warmup, 'warm-up epoch')}.",
    )


def _one_key(pages: Book, exp: str, key: str, table: pd.DataFrame) -> None:
    order = {format_value(v): i for i, v in enumerate(sweeps.ordered_values(table[key]))}
    ranks = [order[format_value(v)] for v in table[key]]
    table = table.assign(_order=ranks).sort_values(["site", "environment", "_order"], kind="stable")
    shown, cut = _cap(table, "points")
    repeats = int(table["repeats"].max())
    fig = pages.new(
        f"Sweep: {exp}",
        f"Final validation accuracy (left) and mean time per epoch (right) for each {key}"
        + ("; mean \u00b1 sd over the repeats." if repeats > 1 else ".")
        + cut,
        png=f"sweep-{exp}",
    )
    axes = fig.subplots(1, 2, sharey=True)
    labels = [str(p) for p in shown["point_label"]]
    y = np.arange(len(shown))
    axes[0].barh(y, shown["val_accuracy"] * 100, xerr=np.nan_to_num(shown["val_accuracy_sd"] * 100))
    axes[0].set_xlabel("validation accuracy (%)")
    if shown["epoch_seconds"].notna().any():
        axes[1].barh(y, shown["epoch_seconds"], xerr=np.nan_to_num(shown["epoch_seconds_sd"]))
        axes[1].set_xlabel("seconds per epoch")
    else:
        _no_time(pages, axes[1])
    set_category_ticks(axes[0], labels, width=40)
    axes[1].grid(axis="y", visible=False)


def repeats_pages(pages: Book, runs_df: pd.DataFrame) -> None:
    """Per experiment whose points ran more than once (repeats): mean \u00b1 sd over the seeds of
    the validation and test accuracy and the time per epoch, as error bars."""
    for exp in [e for e in runs_df["experiment"].unique() if e]:
        table = point_table(runs_df, exp)
        if not (table["repeats"] > 1).any():
            continue
        shown, cut = _cap(table, "points")
        fig = pages.new(
            f"Repeats: {exp}",
            "Each point's runs with different seeds: mean \u00b1 sd (error bars) over "
            f"{int(shown['repeats'].max())} seed(s) of the final validation accuracy, the test "
            "accuracy and the time per epoch." + cut,
            png=f"repeats-{exp}",
        )
        axes = fig.subplots(1, 2, sharey=True)
        y = np.arange(len(shown))
        axes[0].errorbar(
            shown["val_accuracy"] * 100,
            y - 0.12,
            xerr=np.nan_to_num(shown["val_accuracy_sd"] * 100),
            fmt="o",
            capsize=3,
            label="validation",
        )
        axes[0].errorbar(
            shown["accuracy"] * 100,
            y + 0.12,
            xerr=np.nan_to_num(shown["accuracy_sd"] * 100),
            fmt="s",
            capsize=3,
            label="test",
        )
        axes[0].set_xlabel("accuracy (%)")
        axes[0].legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=2)
        if shown["epoch_seconds"].notna().any():
            axes[1].errorbar(
                shown["epoch_seconds"],
                y,
                xerr=np.nan_to_num(shown["epoch_seconds_sd"]),
                fmt="o",
                capsize=3,
            )
            axes[1].set_xlabel("seconds per epoch")
        else:
            _no_time(pages, axes[1])
        set_category_ticks(axes[0], [str(p) for p in shown["point_label"]], width=40)
        axes[1].grid(axis="y", visible=False)


def world_size_pages(pages: Book, runs_df: pd.DataFrame, epochs_df: pd.DataFrame) -> None:
    """Elastic runs: the world size over the epochs (at each epoch's end; an epoch that had
    several sizes is marked), and the resets."""
    elastic = list(runs_df.loc[runs_df["elastic"], "run"])
    if not elastic or "world_size" not in epochs_df.columns:
        return
    shown = elastic[:10]
    fig = pages.new(
        "Elastic runs: world size over the epochs",
        "Ranks at the end of each epoch of the runs that train under Horovod elastic "
        "(min_workers/max_workers); a cross marks an epoch during which the world changed "
        "(a rank failed or joined), with the reset's time in the legend."
        + (f" The first 10 of {len(elastic)} elastic runs." if len(elastic) > 10 else ""),
        png="elastic",
    )
    ax = fig.add_subplot()
    for name in shown:
        ep = epochs_df[epochs_df["run"] == name]
        row = runs_df.loc[runs_df["run"] == name].iloc[0]
        took = f", {row['reset_seconds']:.1f} s in all" if row["resets"] else ""
        label = f"{name} ({row['resets']} reset(s){took})"
        ax.step(ep["epoch"], ep["world_size"], where="post", color=pages.colors[name], label=label)
        if "world_sizes" in ep.columns:
            changed = ep[[isinstance(w, list) and len(w) > 1 for w in ep["world_sizes"]]]
            ax.plot(changed["epoch"], changed["world_size"], "x", color=pages.colors[name], ms=12)
    ax.set_xlabel("epoch")
    ax.set_ylabel("ranks (world size)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.xaxis.get_major_locator().set_params(integer=True)  # epochs are whole
    ax.legend(frameon=False)
