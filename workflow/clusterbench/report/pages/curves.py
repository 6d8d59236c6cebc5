"""Training curves: the training loss and the validation accuracy of each run after each
epoch."""

from __future__ import annotations

from clusterbench.report.charts import epoch_axis, log_ticks
from clusterbench.report.context import Context

ORDER = 140


def draw(ctx: Context) -> None:
    from matplotlib.ticker import PercentFormatter

    with ctx.per_run_charts() as (_, epochs_df):
        book = ctx.book
        fig = book.new(
            "Training curves",
            "Training loss (mean over the epoch's batches) and validation accuracy after each "
            "epoch.",
            png="training_curves",
        )
        loss_ax, acc_ax = fig.subplots(1, 2)
        for name in book.order:
            ep = epochs_df[epochs_df["run"] == name]
            style = {"color": book.colors[name], "marker": "o", "markersize": 3.5, "label": name}
            loss_ax.plot(ep["epoch"], ep["train_loss"], **style)
            acc_ax.plot(ep["epoch"], ep["val_accuracy"], **style)
        if (epochs_df["train_loss"] > 0).all():
            loss_ax.set_yscale("log")
            log_ticks(loss_ax.yaxis, epochs_df["train_loss"].min(), epochs_df["train_loss"].max())
            loss_ax.set_ylabel("Training loss (cross-entropy, log scale)")
        else:
            loss_ax.set_ylabel("Training loss (cross-entropy)")
        acc_ax.set_ylabel("Validation accuracy")
        acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        acc_lo, acc_hi = epochs_df["val_accuracy"].min(), epochs_df["val_accuracy"].max()
        if acc_hi - acc_lo < 0.05:  # a flat or single-point curve: at least 10 points of range
            mid = min(max((acc_lo + acc_hi) / 2, 0.05), 0.95)
            acc_ax.set_ylim(mid - 0.05, mid + 0.05)
        for ax in (loss_ax, acc_ax):
            epoch_axis(ax, epochs_df["epoch"])
        handles, labels = loss_ax.get_legend_handles_labels()
        acc_ax.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0,
            frameon=False,
            fontsize=10,
            title="Run",
            title_fontsize=10.5,
        )
