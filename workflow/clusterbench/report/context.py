"""What every page function gets: :class:`Context`, the results (as read and as tables), the
report's settings, the runs skipped here and the :class:`~clusterbench.report.book.Book` the
pages are drawn into."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from clusterbench.report.book import Book
from clusterbench.report.inputs import COMM_COLUMNS, ReportParams, RunData

#: The most runs a chart with one bar or line per run draws (the best on validation).
RUNS_PER_CHART = 24


@dataclass
class Context:
    """The report's inputs for its pages. Every table is the one written beside the PDF."""

    params: ReportParams  # title, author, config hash, timing_warmup_epochs
    prov: dict[str, Any]  # where, when and with what the report is made (provenance.collect)
    runs: Sequence[RunData]  # each run as read (its confusion matrix, per-class scores, ...)
    runs_df: pd.DataFrame  # runs.csv: one row per run, best first on validation
    epochs_df: pd.DataFrame  # epochs.csv: one row per run and epoch
    bench: pd.DataFrame  # benchmarks.csv: one row per Snakemake benchmark record
    bench_missing: Sequence[str] = ()  # --benchmarks arguments that matched no file
    skipped: Sequence[dict[str, Any]] = ()  # the runs skipped here, each with its reason
    history: pd.DataFrame | None = None  # the history of these runs' series (None: none)
    # the comm stage's rows: one per job, operation and size (inputs.COMM_COLUMNS)
    comm: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(COMM_COLUMNS)))
    # each dataset's preprocessed meta.json (inputs.load_datasets), with its own size
    datasets: Sequence[dict[str, Any]] = ()
    # the evaluations while training, by run (inputs.load_watch: evaluate.every_minutes)
    watch: dict[str, dict[str, Any]] = field(default_factory=dict)
    book: Book = field(init=False)  # the style: new pages, the runs' colours and order

    def __post_init__(self) -> None:
        self.book = Book(self.params, self.runs_df)

    @property
    def warmup(self) -> int:
        """Epochs left out of every run's timing."""
        return self.params.timing_warmup_epochs

    @functools.cached_property
    def scaling_model(self) -> pd.DataFrame:
        """scaling_model.csv: each multi-worker run's step time, predicted and measured
        (:mod:`clusterbench.report.scaling_model`)."""
        from clusterbench.report.scaling_model import model_table

        return model_table(self.runs, self.runs_df, self.comm)

    def run_data(self, name: str) -> RunData:
        """The run ``name`` as read."""
        return next(r for r in self.runs if r.name == name)

    @contextlib.contextmanager
    def per_run_charts(
        self, runs_df: pd.DataFrame | None = None
    ) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
        """For charts with one bar or line per run: the runs table and the epochs of at most
        :data:`RUNS_PER_CHART` runs (of ``runs_df``, a part of the runs table; None: all), the
        best on validation; the pages made inside say so (every run stays in the CSVs)."""
        runs_df = self.runs_df if runs_df is None else runs_df
        shown = runs_df.head(RUNS_PER_CHART)
        epochs = self.epochs_df[self.epochs_df["run"].isin(shown["run"])]
        note = None
        if len(shown) < len(runs_df):
            note = (
                f"Shown: the {len(shown)} best of {len(runs_df)} runs on validation "
                "(every run is in runs.csv and epochs.csv)."
            )
        with self.book.subset(note, list(shown["run"])):
            yield shown, epochs
