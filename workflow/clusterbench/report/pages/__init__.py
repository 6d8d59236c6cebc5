"""The report's pages: an extension point (:mod:`clusterbench.core.registry`). The report is the
list of the page modules of this package, in order; each module draws one page or a family
of pages.

A page module provides

- ``ORDER``: a number, its place in the report (pages are drawn by ``ORDER``, then module
  name): title 10, recommendation 12, results 20, skipped 30, environments 40, sweep 50,
  repeats 60, runs_table 70, provenance 80, datasets 84, data_loading 85, epoch_time 90,
  throughput 100, time_breakdown 105, history 107, scaling 110, interconnect 112,
  predicted_scaling 114, world_size 120, one_clock 121, backends 130, curves 140,
  language_models 145, confusion 150, benchmarks 160;
- ``draw(ctx)``: draws its pages with ``ctx.book.new(title, caption, png=..., note=...)``
  (:class:`~clusterbench.report.context.Context`: the settings, the runs and their tables,
  the benchmark records, the skipped runs; ``ctx.book``: the style, the runs' colours and
  order). The caption is the text under the page's title in the PDF and, for a page with a
  figure (``png``: saved as ``figures/<png>.png``), its caption in Snakemake's HTML report
  too (:mod:`clusterbench.report.captions`).

A page with nothing to show says so in words (``ctx.book.nothing_to_show``, or
:func:`clusterbench.report.charts.note` on one chart of several) or draws no page at all,
never an empty chart.

Adding a page is adding one module here: nothing else is edited. The report rule takes every
module of the report package as an input (a new page reruns the report), and the HTML
report's captions are those the pages were drawn with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from numbers import Real

from clusterbench.core.registry import Registry
from clusterbench.report.book import Page
from clusterbench.report.context import Context

#: The page modules (imported when the report is built).
PAGES = Registry(__name__, "report page", underscores=True)

#: What a page module's ``draw`` is.
PageFunction = Callable[[Context], None]


def order_of(name: str) -> Real:
    """The page module ``name``'s ``ORDER``; an error naming it when that is no number."""
    order = PAGES.get(name, "ORDER")
    if not isinstance(order, Real) or isinstance(order, bool):
        module = PAGES.module(name).__name__
        raise TypeError(f"report page {name!r} ({module}): ORDER must be a number, got {order!r}")
    return order


def ordered(
    extra: Iterable[tuple[Real, str, PageFunction]] = (),
) -> list[tuple[Real, str, PageFunction]]:
    """Every page module as (order, name, draw), in the report's order, with ``extra`` ones
    (a comparison's own pages) among them by their order."""
    found = [(order_of(name), name, PAGES.get(name, "draw")) for name in PAGES.names()]
    return sorted([*found, *extra], key=lambda entry: (entry[0], entry[1]))


def build(ctx: Context, extra: Iterable[tuple[Real, str, PageFunction]] = ()) -> list[Page]:
    """Draw every page into ``ctx.book``, in order (:func:`ordered`); returns the pages."""
    for _, name, draw in ordered(extra):
        ctx.book.source = name
        try:
            draw(ctx)
        finally:
            ctx.book.source = None
    return ctx.book.pages
