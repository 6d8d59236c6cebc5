"""The report's pages for the experiment designs: the results sorted on validation, execution
environments (time per epoch, epochs reached, what was skipped), sweeps (heatmaps over two swept
keys), repeats (mean ± sd over seeds) and elastic runs (world size over the epochs).

Each page appears only when the runs have what it shows; every one handles any number of runs,
points and environments (long lists are cut to what a page holds, and the page says so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from clusterbench.report.style import (
    TABLE_ROWS_PER_PAGE,
    Pages,
    _log_ticks,
    draw_table,
    fmt_pct,
    fmt_seconds_sd,
    set_category_ticks,
    wrap_label,
    wrap_text,
)
from clusterbench.report.tables import environment_table, point_table, swept_keys

#: The most bars / rows one chart draws; a page with more says how many it leaves out.
MAX_BARS = 30


def _label_point(point: str) -> str:
    values = json.loads(point)
    return ", ".join(f"{k}={v}" for k, v in values.items())


def results_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    """Every run, best first by validation accuracy, with what it is (experiment, environment,
    swept values), its validation and test accuracy and its time."""
    columns = [
        ("#", 0.03, True),
        ("Run", 0.2, False),
        ("Experiment /\nenvironment", 0.12, False),
        ("Swept values", 0.17, False),
        ("Workers\n(nodes)", 0.07, True),
        ("Epochs", 0.06, True),
        ("Validation\naccuracy", 0.08, True),
        ("Test\naccuracy", 0.07, True),
        ("Time per epoch\n(mean \u00b1 sd)", 0.12, True),
        ("Images/s", 0.08, True),
    ]
    rows = []
    for rank, r in enumerate(runs_df.itertuples(index=False), start=1):
        origin = "\n".join(x for x in (r.experiment, r.environment) if x) or "by hand"
        rows.append(
            [
                str(rank),
                wrap_label(r.run, 24),
                origin,
                wrap_label(_label_point(r.point), 20) or "-",
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
    chunks = [rows[i : i + TABLE_ROWS_PER_PAGE] for i in range(0, len(rows), TABLE_ROWS_PER_PAGE)]
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

        draw_table(fig, columns, [c[0] for c in columns], chunk, style)


def environment_pages(
    pages: Pages, runs_df: pd.DataFrame, skipped: Sequence[dict[str, Any]]
) -> None:
    """Per experiment with environments: time per epoch by environment (log-scale bars, sd
    over repeats as whiskers, epochs reached printed), the skipped environments beside."""
    envs = environment_table(runs_df)
    skipped_envs = [s for s in skipped if s.get("environment")]
    experiments = list(
        dict.fromkeys([*envs["experiment"], *(s.get("experiment") or "" for s in skipped_envs)])
    )
    for exp in experiments:
        part = envs[envs["experiment"] == exp].head(MAX_BARS)
        gone = [s for s in skipped_envs if (s.get("experiment") or "") == exp]
        minutes = runs_df.loc[runs_df["experiment"] == exp, "train_seconds"]
        fig = pages.new(
            f"Execution environments: {exp}",
            "The same training in each environment (workers x nodes x GPUs per node): mean time "
            "per epoch on a log scale (whiskers: sd over the epochs), and the epochs each "
            "reached" + (" in its time box" if len(minutes) else "") + ". Environments this "
            "cluster could not offer are listed as skipped, with the reason.",
            png=f"environments-{exp}",
        )
        grid = fig.add_gridspec(1, 2, width_ratios=(1.7, 1))
        ax = fig.add_subplot(grid[0, 0])
        side = fig.add_subplot(grid[0, 1])
        side.set_axis_off()
        if part.empty:
            pages.note(ax, "No environment of this experiment ran here.")
        else:
            labels = [
                f"{r.environment}\n{r.workers} worker(s), {r.nodes} node(s), "
                f"{r.gpus_per_node} GPU/node"
                for r in part.itertuples(index=False)
            ]
            y = np.arange(len(part))
            colors = pages.sns.color_palette("tab10", len(part))
            values = part["epoch_seconds"].to_numpy(dtype=float)
            spread = np.nan_to_num(part["epoch_seconds_sd"].to_numpy(dtype=float))
            ax.barh(
                y,
                values,
                xerr=spread,
                color=colors,
                capsize=3,
            )
            ax.set_xscale("log")
            finite = values[np.isfinite(values) & (values > 0)]
            if finite.size:
                _log_ticks(ax.xaxis, float(finite.min()), float(finite.max()))
                rows = zip(values, spread, part.itertuples(index=False), strict=True)
                for yi, (v, sd, r) in enumerate(rows):
                    if np.isfinite(v):
                        ax.text(
                            (v + sd) * 1.05,
                            yi,
                            f" {v:.3g} s, {r.epochs:.0f} epochs",
                            va="center",
                            fontsize=9,
                        )
                ax.set_xlim(finite.min() / 2, finite.max() * 6)
            ax.set_xlabel("seconds per epoch (log scale)")
            set_category_ticks(ax, labels, width=40)
        lines = ["Skipped here:"] if gone else ["Nothing skipped."]
        budget = 30  # lines the panel holds
        for n, s in enumerate(gone):
            reason = wrap_text(str(s.get("reason")), 44) or [""]
            entry = [f"\u2022 {s.get('environment')} ({s.get('run')}):"]
            entry += [f"   {w}" for w in reason[:8]]
            if len(lines) + len(entry) > budget:
                lines.append(f"and {len(gone) - n} more (see skipped.csv)")
                break
            lines += entry
        side.text(0.0, 1.0, "\n".join(lines), va="top", fontsize=9.5, transform=side.transAxes)


def sweep_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    """Per experiment with a matrix: validation accuracy and time per epoch over two swept keys
    (heatmaps, the best cell marked; further keys averaged over) or over one (bars)."""
    for exp, keys in swept_keys(runs_df).items():
        if not keys:
            continue
        table = point_table(runs_df, exp)
        if len(keys) >= 2:
            _heatmaps(pages, exp, keys, table)
        else:
            _one_key(pages, exp, keys[0], table)


def _heatmaps(pages: Pages, exp: str, keys: list[str], table: pd.DataFrame) -> None:
    rows_key, cols_key = keys[0], keys[1]
    rest = keys[2:]
    envs = [e for e in table["environment"].unique() if e]
    note = []
    if rest:
        note.append(f"averaged over {', '.join(rest)}")
    if envs:
        note.append(f"averaged over the environments {', '.join(envs)}")
    fig = pages.new(
        f"Sweep: {exp}",
        f"Final validation accuracy (left) and mean time per epoch (right) over {rows_key} x "
        f"{cols_key}" + (f" ({'; '.join(note)})" if note else "") + "; mean over repeats. "
        "The best cell on validation is outlined.",
        png=f"sweep-{exp}",
    )
    axes = fig.subplots(1, 2)
    acc = table.pivot_table(index=rows_key, columns=cols_key, values="val_accuracy")
    sec = table.pivot_table(index=rows_key, columns=cols_key, values="epoch_seconds")
    best = np.unravel_index(np.nanargmax(acc.to_numpy(dtype=float)), acc.shape)
    annotate = acc.size <= 100
    for ax, data, fmt, cmap, title in (
        (axes[0], acc * 100, ".1f", "viridis", "validation accuracy (%)"),
        (axes[1], sec, ".3g", "rocket_r", "time per epoch (s)"),
    ):
        pages.sns.heatmap(
            data, ax=ax, annot=annotate, fmt=fmt, cmap=cmap, cbar_kws={"label": title}
        )
        ax.add_patch(
            _outline(best[1], best[0]),
        )
        ax.set_title(title)
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)


def _outline(x: int, y: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, fill=False, edgecolor="red", lw=3)


def _one_key(pages: Pages, exp: str, key: str, table: pd.DataFrame) -> None:
    table = table.head(MAX_BARS)
    fig = pages.new(
        f"Sweep: {exp}",
        f"Final validation accuracy (left) and mean time per epoch (right) for each {key}; "
        "mean \u00b1 sd over repeats.",
        png=f"sweep-{exp}",
    )
    axes = fig.subplots(1, 2, sharey=True)
    labels = [str(p) for p in table["point_label"]]
    y = np.arange(len(table))
    axes[0].barh(y, table["val_accuracy"] * 100, xerr=np.nan_to_num(table["val_accuracy_sd"] * 100))
    axes[0].set_xlabel("validation accuracy (%)")
    axes[1].barh(y, table["epoch_seconds"], xerr=np.nan_to_num(table["epoch_seconds_sd"]))
    axes[1].set_xlabel("seconds per epoch")
    set_category_ticks(axes[0], labels)
    axes[1].grid(axis="y", visible=False)


def repeats_pages(pages: Pages, runs_df: pd.DataFrame) -> None:
    """Per experiment whose points ran more than once (repeats): mean \u00b1 sd over the seeds of
    the validation and test accuracy and the time per epoch, as error bars."""
    for exp in [e for e in runs_df["experiment"].unique() if e]:
        table = point_table(runs_df, exp)
        if not (table["repeats"] > 1).any():
            continue
        shown = table.head(MAX_BARS)
        fig = pages.new(
            f"Repeats: {exp}",
            "Each point's runs with different seeds: mean \u00b1 sd (error bars) over "
            f"{int(shown['repeats'].max())} seed(s) of the final validation accuracy, the test "
            "accuracy and the time per epoch."
            + (f" The first {MAX_BARS} of {len(table)} points." if len(table) > MAX_BARS else ""),
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
        axes[0].legend(frameon=False)
        axes[1].errorbar(
            shown["epoch_seconds"],
            y,
            xerr=np.nan_to_num(shown["epoch_seconds_sd"]),
            fmt="o",
            capsize=3,
        )
        axes[1].set_xlabel("seconds per epoch")
        set_category_ticks(axes[0], [str(p) for p in shown["point_label"]])
        axes[1].grid(axis="y", visible=False)


def world_size_pages(pages: Pages, runs_df: pd.DataFrame, epochs_df: pd.DataFrame) -> None:
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
        resets = runs_df.loc[runs_df["run"] == name, "resets"].iloc[0]
        label = f"{name} ({resets} reset(s))"
        ax.step(ep["epoch"], ep["world_size"], where="post", color=pages.colors[name], label=label)
        if "world_sizes" in ep.columns:
            changed = ep[[isinstance(w, list) and len(w) > 1 for w in ep["world_sizes"]]]
            ax.plot(changed["epoch"], changed["world_size"], "x", color=pages.colors[name], ms=12)
    ax.set_xlabel("epoch")
    ax.set_ylabel("ranks (world size)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(frameon=False)
