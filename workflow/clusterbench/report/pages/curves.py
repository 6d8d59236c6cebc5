"""Training curves: the training loss and the validation accuracy of each run after each
epoch (a language model's validation loss and perplexity are on its own page)."""

from __future__ import annotations

from clusterbench.report.charts import epoch_axis, log_ticks, note
from clusterbench.report.context import Context
from clusterbench.report.workloads import language_models, left_out

ORDER = 140


def draw(ctx: Context) -> None:
    from matplotlib.ticker import PercentFormatter

    lm = set(language_models(ctx.runs_df)["run"])
    with ctx.per_run_charts() as (_, epochs_df):
        book = ctx.book
        fig = book.new(
            "Training curves",
            "Training loss (mean over the epoch's batches; per token for a language model) and "
            "validation accuracy after each epoch.",
            png="training_curves",
            note=left_out(ctx.runs_df, "the validation accuracy (right)"),
        )
        loss_ax, acc_ax = fig.subplots(1, 2)
        for name in book.order:
            ep = epochs_df[epochs_df["run"] == name]
            style = {"color": book.colors[name], "marker": "o", "markersize": 3.5, "label": name}
            loss_ax.plot(ep["epoch"], ep["train_loss"], **style)
            if name not in lm:
                acc_ax.plot(ep["epoch"], ep["val_accuracy"], **style)
        if (epochs_df["train_loss"] > 0).all():
            loss_ax.set_yscale("log")
            log_ticks(loss_ax.yaxis, epochs_df["train_loss"].min(), epochs_df["train_loss"].max())
            loss_ax.set_ylabel("Training loss (cross-entropy, log scale)")
        else:
            loss_ax.set_ylabel("Training loss (cross-entropy)")
        epoch_axis(loss_ax, epochs_df["epoch"])
        accuracy = epochs_df[~epochs_df["run"].isin(lm)]
        if accuracy.empty:
            note(
                acc_ax,
                "Validation accuracy does not apply\nto language models: their validation "
                "loss\nand perplexity are on the language-model page.",
            )
        else:
            acc_ax.set_ylabel("Validation accuracy")
            acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            acc_lo, acc_hi = accuracy["val_accuracy"].min(), accuracy["val_accuracy"].max()
            if acc_hi - acc_lo < 0.05:  # a flat or single-point curve: at least 10 points
                mid = min(max((acc_lo + acc_hi) / 2, 0.05), 0.95)
                acc_ax.set_ylim(mid - 0.05, mid + 0.05)
            epoch_axis(acc_ax, accuracy["epoch"])
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
