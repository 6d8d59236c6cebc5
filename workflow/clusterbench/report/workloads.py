"""What a run's figures mean by what it trained: a language model's accuracy is per token and
does not apply (its loss, perplexity and tokens per second do), and on synthetic data (random
pixels, labels and tokens) the accuracy means nothing. The pages' cells and notes for them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from clusterbench.report.text import fmt_number_sd, fmt_pct, list_runs

#: What the report says of every run on synthetic data.
SYNTHETIC = "synthetic: accuracy not meaningful"
#: The marks of the notes below a table.
SYNTHETIC_MARK, LANGUAGE_MARK = "\u2020", "\u2021"


def language_models(runs_df: pd.DataFrame) -> pd.DataFrame:
    """The runs that trained a language model."""
    return runs_df[runs_df["task"] == "language-model"]


def classifiers(runs_df: pd.DataFrame) -> pd.DataFrame:
    """The runs that trained a classification model (on images)."""
    return runs_df[runs_df["task"] != "language-model"]


def accuracy_cell(r: Any, which: str) -> str:
    """The cell of a run's validation (``which="val"``) or test accuracy: a language model's
    perplexity instead (marked), a synthetic run's mark instead of the number."""
    if r.task == "language-model":
        ppl = r.final_val_perplexity if which == "val" else r.perplexity
        marks = LANGUAGE_MARK + (SYNTHETIC_MARK if r.synthetic else "")
        return f"ppl {ppl:,.1f}{marks}" if pd.notna(ppl) else f"n/a{marks}"
    if r.synthetic:
        return f"synthetic{SYNTHETIC_MARK}"
    return fmt_pct(r.final_val_accuracy if which == "val" else r.accuracy)


def throughput_cell(r: Any, sd: bool = False) -> str:
    """A run's throughput: images/s, or a language model's tokens/s (with its unit)."""
    if not r.timed_epochs:
        return "n/a"
    if r.task == "language-model":
        if sd:
            return fmt_number_sd(r.tokens_per_second, r.std_tokens_per_second) + " tok/s"
        return f"{r.tokens_per_second:,.0f} tok/s"
    if sd:
        return fmt_number_sd(r.images_per_second, r.std_images_per_second)
    return f"{r.images_per_second:,.0f}"


def throughput_header(tasks: Any, prefix: str = "") -> str:
    """A throughput column's header for runs of ``tasks``: ``(images/s)`` for classifiers,
    ``(tokens/s)`` for language models alone, both where they mix (each language model's cell
    then says tok/s: :func:`throughput_cell`)."""
    found = {"language-model" if t == "language-model" else "classification" for t in tasks}
    if found == {"language-model"}:
        return f"{prefix}(tokens/s)"
    return f"{prefix}(images/s)" if found == {"classification"} else f"{prefix}(img/s; tok/s)"


def lm_only_cell(cell: str, lm_only: bool) -> str:
    """A throughput cell of a table whose runs are all language models (its header says
    tokens/s: :func:`throughput_header`): without its own unit."""
    return cell.removesuffix(" tok/s") if lm_only else cell


def notes(runs_df: pd.DataFrame) -> list[str]:
    """The notes a table of ``runs_df`` needs for its marked cells."""
    found = []
    if runs_df["synthetic"].any():
        found.append(f"{SYNTHETIC_MARK} {SYNTHETIC} (random pixels, labels or tokens).")
    if (runs_df["task"] == "language-model").any():
        found.append(
            f"{LANGUAGE_MARK} language model: perplexity (exp of the loss per token) in place of "
            "accuracy, which does not apply; throughput in tokens/s."
        )
    return found


def left_out(runs_df: pd.DataFrame, what: str) -> str | None:
    """The sentence saying that the language-model runs of ``runs_df`` are left out of
    ``what`` (None: there are none)."""
    lm = language_models(runs_df)
    if lm.empty:
        return None
    return (
        f"Language-model runs ({list_runs(sorted(lm['run']), 4)}) are left out: {what} does not "
        "apply to them (their loss, perplexity and tokens/s: the language-model page)."
    )
