"""The runs and the report's timing in words: sentences more than one page says (what a run
is, a scaling series, how epochs are timed, which runs have no timed epoch)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from clusterbench.config.experiments import format_value
from clusterbench.report.text import plural, shorten_text

#: What runs share to be compared for scaling (``tables.BASELINE_KEY``), in words.
BASELINE_WORDS = (
    "the same dataset, model, global batch, device, backend, BN mode and precision/memory "
    "format (any gradient compression: one worker exchanges no gradients)"
)


def describe_run(row: pd.Series) -> str:
    """'digits, small_cnn, 2 workers on 1 node, horovod'."""
    return (
        f"{row['dataset']}, {row['model']}, {plural(row['workers'], 'worker')} on "
        f"{plural(row['nodes'], 'node')}, {row['backend']}"
    )


def describe_series(key: dict[str, Any] | pd.Series) -> str:
    """A scaling series (``BASELINE_KEY``) in words: 'digits / small_cnn, batch 256, cpu,
    horovod, aggregate BN'."""
    extra = "" if key["precision"] == "fp32" else f", {key['precision']}"
    extra += ", channels-last" if key["memory_format"] == "channels_last" else ""
    extra += compression_words(key.get("grad_compression"))
    return (
        f"{key['dataset']} / {key['model']}, batch {key['global_batch']}, {key['device']}, "
        f"{key['backend']}, {key['bn']} BN{extra}"
    )


def compression_words(grad_compression: str | None) -> str:
    """', fp16 gradients' for a compressed allreduce; nothing for none."""
    return f", {grad_compression} gradients" if grad_compression not in (None, "none") else ""


def series_words(row: pd.Series, runs_df: pd.DataFrame) -> str:
    """A scaling series in words (:func:`describe_series`), with its site where the runs come
    from several."""
    several = "site" in runs_df and runs_df["site"].nunique() > 1
    return describe_series(row) + (f" on site {row['site']}" if several else "")


def point_label(point: str) -> str:
    """A run's swept values (its ``point``, JSON) as 'lr=0.1, momentum=0.9'."""
    values = json.loads(point)
    return ", ".join(f"{k}={format_value(v)}" for k, v in values.items())


def first_epochs(warmup: int) -> str:
    """'the first epoch', 'the first 3 epochs'."""
    return "the first epoch" if warmup == 1 else f"the first {warmup} epochs"


def timing_sentence(warmup: int) -> str:
    """How the report times runs, in words."""
    if warmup == 0:
        return "Timing: epoch time and throughput are means over all epochs of each run."
    first = "epoch, which is" if warmup == 1 else f"{warmup} epochs, which are"
    return (
        "Timing: epoch time and throughput are mean \u00b1 sd over each run's epochs after "
        f"the first {first} left out as warm-up."
    )


def untimed_note(runs_df: pd.DataFrame, mark: str = "") -> str | None:
    """The page note naming the runs without a timed epoch and why; None when every run has one."""
    untimed = runs_df[runs_df["timed_epochs"] == 0]
    if untimed.empty:
        return None
    note = f"{mark}n/a: no epoch left to time: " + "; ".join(
        f"{r.run}: {r.timing_note}" for r in untimed.itertuples(index=False)
    )
    return shorten_text(note, 300, placeholder=" ...") + "."
