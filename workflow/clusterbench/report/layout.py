"""The page's geometry (A4 landscape, margins, font sizes) and text fitted to it as drawn:
character counts cannot tell how wide CJK, emoji or missing-glyph boxes are, so widths are
measured in the current theme's font (:mod:`clusterbench.report.theme`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from clusterbench.report.text import wrap_text

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches


#: Width of a page's text, between the margins of 3 % of the page width (points).
TEXT_WIDTH_PT = 0.94 * PAGE_SIZE[0] * 72


#: Resolution text widths are measured at (that of the PNG figures; hinting at a lower one
#: widens the text).
MEASURE_DPI = 150


#: Font sizes (points) of a page's title, subtitle (its caption) and note.
TITLE_PT, SUBTITLE_PT, NOTE_PT = 19, 11, 9.5


#: A text line's height per point of font size and unit of line spacing (matplotlib, DejaVu).
LINE_HEIGHT = 0.96


@lru_cache(maxsize=1)
def _measuring_renderer() -> Any:
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, MEASURE_DPI)


def drawn_width(text: str, size: float, weight: str = "normal") -> float:
    """Width in points of ``text`` on one line, drawn in the current theme's font (with its
    fallbacks, and boxes for what no font has) at ``size`` points."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(family=matplotlib.rcParams["font.family"], size=size, weight=weight)
    width = _measuring_renderer().get_text_width_height_descent(text, prop, ismath=False)[0]
    return width * 72 / MEASURE_DPI


def fit_line(text: str, size: float, weight: str = "normal", max_pt: float = TEXT_WIDTH_PT) -> str:
    """``text`` cut (ending in ' ...') so that it is at most ``max_pt`` points wide as drawn."""
    if drawn_width(text, size, weight) <= max_pt:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if drawn_width(text[:mid].rstrip() + " ...", size, weight) <= max_pt:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " ..."


def fit_wrap(
    text: str,
    columns: int,
    size: float,
    max_pt: float = TEXT_WIDTH_PT,
    max_lines: int | None = None,
) -> list[str]:
    """``text`` wrapped at ``columns`` (:func:`~clusterbench.report.text.wrap_text`), then
    narrower where a line drawn at ``size`` points is wider than ``max_pt``; at most
    ``max_lines`` lines (the last one cut, :func:`fit_line`)."""
    lines = wrap_text(text, columns)
    for _ in range(4):
        widest = max((drawn_width(line, size) for line in lines), default=0.0)
        if widest <= max_pt or columns <= 10:
            break
        columns = max(10, int(columns * max_pt / widest) - 1)
        lines = wrap_text(text, columns)
    if max_lines and len(lines) > max_lines:
        last = fit_line(" ".join(lines[max_lines - 1 :]), size, max_pt=max_pt)
        lines = [*lines[: max_lines - 1], last]
    return lines
