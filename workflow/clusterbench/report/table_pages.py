"""Tables drawn on a page: rows of cell texts under a header, as many pages as they need
(:func:`table_pages`), cells wrapped to their column as drawn (:func:`cell_text`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from clusterbench.report.layout import PAGE_SIZE, TEXT_WIDTH_PT, fit_wrap
from clusterbench.report.text import part_of, text_width

if TYPE_CHECKING:
    from clusterbench.report.book import Book

#: A table's columns: (header, relative width, right-aligned).
Columns = Sequence[tuple[str, float, bool]]

#: The look of a body cell: (face colour, bold).
CellStyle = tuple[str, bool]


TABLE_ROWS_PER_PAGE = 12


#: Smallest height of a table text line unit (points): tables with more lines take more pages.
TABLE_UNIT_PT = 12.5


#: The font size of a table's body cells (points; :func:`draw_table`).
TABLE_FONT_PT = 9.5


#: Table cells whose provenance differs from the other runs'.
DIFFERS_COLOR = "#fbd3ad"


#: The best run's row (the first of a table sorted best first).
BEST_COLOR = "#d4ecd0"


def striped(row: int) -> CellStyle:
    """The body cells' plain look: every other row shaded (``row`` counted on its page)."""
    return ("#eef1f6" if row % 2 == 0 else "white"), False


def best_first(i: int, col: int) -> CellStyle | None:
    """:func:`table_pages` style of a table sorted best first: the first row highlighted."""
    return (BEST_COLOR, True) if i == 0 else None


def draw_table(fig, columns, header, rows, style, bottom: float = 0.06, top: float = 0.8) -> None:
    """A table of ``rows`` (lists of cell texts) under a header, in the page's width from the
    top of the page's content (``top``) down; ``columns``: (header, relative width,
    right-aligned); ``style(row, col) -> (face colour, bold)`` for the body cells (row 0 =
    first row). Row heights follow their number of text lines; the table fills at most the
    space above ``bottom``."""
    from matplotlib.table import Table

    ax = fig.add_axes((0.03, bottom, 0.94, top - bottom))
    ax.set_axis_off()
    n_lines = [max(c.count("\n") + 1 for c in row) for row in [header, *rows]]
    units = [1 + 0.9 * n for n in n_lines]  # row height in text lines, with padding
    line_h = min(0.038, 1 / sum(units))  # axes fraction per unit: fill at most the page
    heights = [line_h * u for u in units]
    table = Table(ax, bbox=(0, 1 - sum(heights), 1, sum(heights)))
    for row, (cells, height) in enumerate(zip([header, *rows], heights, strict=True)):
        for col, (text, (_, width, right)) in enumerate(zip(cells, columns, strict=True)):
            cell = table.add_cell(
                row, col, width, height, text=text, loc="right" if right else "left"
            )
            cell.PAD = 0.06
            cell.set_edgecolor("white")
            cell.get_text().set_fontsize(TABLE_FONT_PT)
            if row == 0:
                cell.set_facecolor("#2f4b7c")
                cell.get_text().set(color="white", weight="bold", fontsize=9)
            else:
                face, bold = style(row - 1, col)
                cell.set_facecolor(face)
                if bold:
                    cell.get_text().set_weight("bold")
    table.auto_set_font_size(False)
    ax.add_table(table)


def table_pages(
    book: Book,
    title: str,
    caption: str,
    columns: Columns,
    rows: list[list[str]],
    style: Callable[[int, int], CellStyle | None] | None = None,
    note: str | None = None,
    bottom: float = 0.06,
    top: float = 0.8,
) -> None:
    """``rows`` under ``columns`` on as many pages as they take (each titled '``title`` (2 of
    3)' where several, with the same caption and note). ``style(i, col)`` is the look of
    the cell of row ``i`` (counted over all pages) and column ``col``, None for the striped
    default."""
    header = [c[0] for c in columns]
    chunks = chunk_rows(rows, table_budget(header, top, bottom), TABLE_ROWS_PER_PAGE)
    start = 0
    for page_no, chunk in enumerate(chunks, start=1):
        fig = book.new(title + part_of(page_no, len(chunks)), caption, layout=None, note=note)

        def cell_style(row: int, col: int, first: int = start) -> CellStyle:
            return (style(first + row, col) if style else None) or striped(row)

        draw_table(fig, columns, header, chunk, cell_style, bottom=bottom, top=top)
        start += len(chunk)


def cell_text(text: str, width: float, max_lines: int | None = None) -> str:
    """``text`` wrapped to fit, bold, a column of relative width ``width`` of
    :func:`draw_table` (measured as drawn: names without spaces are cut where they reach the
    edge); at most ``max_lines`` lines (the last one cut)."""
    room = width * TEXT_WIDTH_PT * 0.88 - 4  # the cell's padding, each side
    lines = [
        w
        for line in text.split("\n")
        for w in fit_wrap(line, max(10, text_width(line)), TABLE_FONT_PT * 1.1, room, max_lines)
    ]
    return "\n".join(lines)


def table_units(row: list[str]) -> float:
    """Height of a table row in line units (see :func:`draw_table`)."""
    return 1 + 0.9 * max(c.count("\n") + 1 for c in row)


def table_budget(header: list[str], top: float = 0.8, bottom: float = 0.06) -> float:
    """The line units (:func:`table_units`) of body rows a table from ``top`` to ``bottom``
    (figure fractions) holds under ``header`` at the smallest row height; for
    :func:`chunk_rows`."""
    return (top - bottom) * PAGE_SIZE[1] * 72 / TABLE_UNIT_PT - table_units(header)


def chunk_rows(rows: list[list[str]], max_units: float, max_rows: int) -> list[list[list[str]]]:
    """``rows`` split into pages of at most ``max_rows`` rows and ``max_units`` line units."""
    chunks: list[list[list[str]]] = [[]]
    used = 0.0
    for row in rows:
        u = table_units(row)
        if chunks[-1] and (used + u > max_units or len(chunks[-1]) >= max_rows):
            chunks.append([])
            used = 0.0
        chunks[-1].append(row)
        used += u
    return chunks
