"""Page furniture: the :class:`Book` the pages are drawn into (each page an A4 figure with a
title, its caption under it and an optional note above the footer; the runs' colours and
order), the footer every page and figure carries, and the PDF written from the pages.

Each page is kept as a :class:`Page`: its figure with the texts it was made with, so that the
same caption goes to the PDF and, for a page with a figure (``png``), to Snakemake's HTML
report (:mod:`clusterbench.report.captions`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from clusterbench.core import provenance
from clusterbench.core.atomic import atomic_path
from clusterbench.report import charts
from clusterbench.report.inputs import ReportParams
from clusterbench.report.layout import NOTE_PT, PAGE_SIZE, SUBTITLE_PT, TITLE_PT, fit_line, fit_wrap
from clusterbench.report.text import commit_text, shorten_text
from clusterbench.report.theme import shown


@dataclass
class Page:
    """One page of the report: its figure and the texts it was made with."""

    figure: Any
    title: str
    caption: str | None  # as drawn under the title (a subset's note included)
    note: str | None
    png: str | None  # the name of its figure in figures/, or None: a page only
    source: str | None  # the page module that made it
    contents: str | None = None  # how the PDF's contents list it (None: by its title)


class Book:
    """The pages of a report, drawn with one consistent style (the page modules' "style"):
    :meth:`new` starts a page; the runs have one colour each (:attr:`colors`) and are listed
    in one order (:attr:`order`, :func:`clusterbench.report.charts.run_order`)."""

    def __init__(self, params: ReportParams, runs_df: pd.DataFrame) -> None:
        import seaborn as sns

        self.sns = sns
        self.params = params
        self.order = charts.run_order(runs_df)
        colors = sns.color_palette("tab10" if len(self.order) <= 10 else "husl", len(self.order))
        self.colors = dict(zip(self.order, colors, strict=True))
        self.pages: list[Page] = []
        #: Said after the caption of the pages made while it is set (:meth:`subset`).
        self.subset_note: str | None = None
        #: The page module drawing now (set while the pages are built), kept with each page.
        self.source: str | None = None

    def new(
        self,
        title: str,
        caption: str | None = None,
        png: str | None = None,
        note: str | None = None,
        layout: str | None = "constrained",
        contents: str | None = None,
    ):
        """A new page: bold title, its caption under it in grey (wrapped), an optional note
        above the footer; ``png``: also saved as ``figures/<png>.png``; ``contents``: how the
        PDF's list of pages in the HTML report names it (by default its title). Returns the
        figure."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=PAGE_SIZE, layout=layout)
        drawn = fit_line(shorten_text(title, 80, placeholder=" ..."), TITLE_PT, "bold")
        fig.text(0.03, 0.955, drawn, fontsize=TITLE_PT, weight="bold", va="center")
        top = 0.92
        if caption and self.subset_note:
            caption = f"{caption} {self.subset_note}"
        if caption:
            lines = self.subtitle_lines(caption)
            fig.text(
                0.03,
                0.915,
                "\n".join(lines),
                fontsize=SUBTITLE_PT,
                color="0.3",
                va="top",
                linespacing=1.4,
            )
            top = 0.905 - 0.03 * len(lines)
        note_lines = self.note_lines(note)
        if note_lines:
            fig.text(
                0.03,
                0.033,
                "\n".join(note_lines),
                fontsize=NOTE_PT,
                color="0.35",
                va="bottom",
                linespacing=1.35,
            )
        if layout == "constrained":
            bottom = 0.045 + 0.021 * len(note_lines) if note_lines else 0.035
            fig.get_layout_engine().set(rect=(0.02, bottom, 0.96, top - bottom))
        self.pages.append(Page(fig, title, caption, note, png, self.source, contents))
        return fig

    def nothing_to_show(self, title: str, caption: str, why: str, png: str | None = None):
        """A page whose chart has nothing to draw: it says ``why`` in words, never an empty
        chart. Returns the figure."""
        fig = self.new(title, caption, png=png)
        charts.note(fig.add_subplot(), why)
        return fig

    @contextlib.contextmanager
    def subset(self, note: str | None, runs: list[str] | None = None):
        """Pages made inside show only ``runs`` (in the report's order; None: every run) and
        say ``note`` after their caption."""
        order = self.order
        self.subset_note = note
        if runs is not None:
            self.order = [name for name in order if name in set(runs)]
        try:
            yield
        finally:
            self.subset_note, self.order = None, order

    @staticmethod
    def subtitle_lines(caption: str) -> list[str]:
        """The lines of a page's caption: at most 4, each within the page's width."""
        return fit_wrap(caption, 135, SUBTITLE_PT, max_lines=4)

    @staticmethod
    def note_lines(note: str | None) -> list[str]:
        """The lines of a page's note (its own lines wrapped within the page's width)."""
        return [w for line in (note or "").split("\n") for w in fit_wrap(line, 150, NOTE_PT)]

    def run_axis(self, ax, names: list[str]) -> None:
        """Horizontal per-run axis: wrapped run names as tick labels, coloured like their run."""
        charts.set_category_ticks(ax, names, [self.colors[n] for n in names])

    @staticmethod
    def note(ax, text: str) -> None:
        """``ax`` says ``text`` instead of drawing (:func:`clusterbench.report.charts.note`)."""
        charts.note(ax, text)


def footer_text(params: ReportParams, prov: dict[str, Any]) -> str:
    """The footer of every PDF page and PNG figure: title, config hash and the commit of the
    report's code (12 characters, '(dirty)' with uncommitted changes)."""
    git = prov["git"]
    commit = commit_text(git["commit"], git.get("dirty"), 12)
    title = shorten_text(params.title, 80, placeholder=" ...")
    return f"{title}  \u00b7  config {params.config_hash}  \u00b7  commit {commit}"


def stamp_footer(fig, footer: str, page: int, total: int) -> None:
    """Draw ``footer`` and 'page N of M' at the bottom of the page ``fig``."""
    fig.text(0.03, 0.015, footer, fontsize=8.5, color="0.5")
    fig.text(0.97, 0.015, f"page {page} of {total}", fontsize=8.5, color="0.5", ha="right")


def stamp_footers(pages: list[Page], footer: str) -> None:
    """:func:`stamp_footer` on every page, numbered."""
    for i, page in enumerate(pages, start=1):
        stamp_footer(page.figure, footer, i, len(pages))


def pdf_metadata(params: ReportParams, prov: dict[str, Any]) -> dict[str, str]:
    return {
        "Title": shown(params.title),
        "Author": shown(params.author or "clusterbench"),
        "Subject": f"clusterbench report; config {params.config_hash}; "
        f"commit {provenance.describe_commit(prov['git'])}",
        "Creator": "clusterbench.report",
    }


def write_pdf(pages: list[Page], path: Path, metadata: dict[str, str]) -> None:
    """Every page into the PDF ``path`` (atomic)."""
    from matplotlib.backends.backend_pdf import PdfPages

    with atomic_path(path) as tmp:
        with PdfPages(tmp, metadata=metadata) as pdf:
            for page in pages:
                pdf.savefig(page.figure)
