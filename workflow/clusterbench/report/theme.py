"""The report's look: matplotlib settings (:func:`theme`) and fonts, with the fonts of wide
coverage that back them up and the characters no font here can draw (named in the log).

Every text of the report is drawn literally: the theme turns mathtext and TeX off, so a ``$``
in a title or run name is a dollar sign. Every text is drawn as :func:`shown` gives it: in NFC,
an invisible or control character written out as ``<U+200B>`` (a byte-order mark in a class or
host name crashed matplotlib's PDF backend, after all the training). The pages are built and
saved inside :func:`style`, which does both.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from clusterbench.core import names

#: Fonts of wide coverage (CJK, symbols, emoji) that draw, where installed, the characters the
#: report's own fonts lack (matplotlib's font fallback: a list of families); the first found
#: of each group is enough, the others are the same glyphs under another name.
FALLBACK_FONTS = (
    ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR"),
    ("Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback"),
    ("Noto Sans",),
    ("Noto Sans Symbols",),
    ("Noto Sans Symbols2", "Noto Sans Symbols 2"),
    ("Noto Emoji", "Symbola"),
)


#: The faces the report draws text in (generic family, weight): a character is drawable when
#: each of them, or one of its fallbacks, has it.
REPORT_FACES = (("sans-serif", "normal"), ("sans-serif", "bold"), ("monospace", "normal"))


#: Most characters named per text in a missing-glyph warning.
MISSING_GLYPHS_LISTED = 12


def theme() -> dict[str, Any]:
    """rcParams of the report style: seaborn's whitegrid theme at a size readable on A4.

    Every text of the report is drawn literally, in one place for all of them (titles, table
    cells, tick labels, legends, notes, footers): no mathtext (``text.parse_math``; a ``$`` in
    a title or run name is a dollar sign) and no TeX (``text.usetex``). Each text object takes
    these when it is created, so the pages are built inside ``rc_context(theme())``. Fonts of
    wide coverage that are installed (:data:`FALLBACK_FONTS`) follow the report's own fonts
    for the characters those lack."""
    import seaborn as sns

    rc = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.95)}
    rc.update(
        {
            "axes.titleweight": "bold",
            "axes.spines.right": False,
            "axes.spines.top": False,
            "pdf.fonttype": 42,
            "savefig.dpi": 150,
            "text.parse_math": False,
            "text.usetex": False,
            "font.family": font_families("sans-serif"),
        }
    )
    return rc


def shown(text: Any) -> str:
    """A text as the report draws it: the text of a title, a run, class or host name in
    Unicode's NFC, each invisible or control character but a line break written as
    ``<U+200B>`` (:func:`clusterbench.core.names.visible`): safe for every font, and seen."""
    return names.visible("" if text is None else str(text))


@contextmanager
def style() -> Iterator[None]:
    """The report's look while its pages are built and saved: :func:`theme`'s settings, and
    every text matplotlib is given (titles, table cells, tick and axis labels, legends, notes)
    set as :func:`shown` gives it, in one place for all of them, as ``text.parse_math`` is for
    mathtext: ``Text.set_text``, through which matplotlib sets every text, tick labels made
    while drawing included, wrapped for the while."""
    import matplotlib
    from matplotlib.text import Text

    original = Text.set_text

    def set_text(self: Text, s: Any) -> None:
        original(self, None if s is None else shown(s))

    Text.set_text = set_text
    try:
        with matplotlib.rc_context(theme()):
            yield
    finally:
        Text.set_text = original


@lru_cache(maxsize=1)
def fallback_fonts() -> tuple[str, ...]:
    """The installed families of :data:`FALLBACK_FONTS`, the first found of each group."""
    from matplotlib import font_manager

    installed = set(font_manager.get_font_names())
    found = (next((f for f in group if f in installed), None) for group in FALLBACK_FONTS)
    return tuple(f for f in found if f)


def font_families(generic: str) -> list[str]:
    """A family list for matplotlib's font fallback: the ``generic`` family ('sans-serif',
    'monospace': the theme's font of that kind), then :func:`fallback_fonts`."""
    return [generic, *fallback_fonts()]


def font_files(generic: str, weight: str = "normal") -> list[Any]:
    """The font files that draw text of the ``generic`` family in this weight, in fallback
    order, as matplotlib picks them under the current rcParams (call inside the theme)."""
    from matplotlib import font_manager
    from matplotlib.font_manager import FontProperties

    files: list[Any] = []
    for i, family in enumerate(font_families(generic)):
        try:
            path = font_manager.findfont(
                FontProperties(family=family, weight=weight), fallback_to_default=i == 0
            )
        except ValueError:
            continue
        if path not in files:
            files.append(path)
    return files


@lru_cache(maxsize=64)
def font_charmap(path: Any) -> frozenset[int]:
    """The code points a font file has glyphs for (its cmap)."""
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(path).get_charmap())


def drawable_codepoints(faces: tuple[tuple[str, str], ...] = REPORT_FACES) -> frozenset[int]:
    """The characters that every face the report draws in (:data:`REPORT_FACES`) has a glyph
    for, in its own font or a fallback; under the current rcParams (call inside the theme)."""
    covered = [
        frozenset().union(*(font_charmap(path) for path in font_files(generic, weight)))
        for generic, weight in faces
    ]
    return frozenset.intersection(*covered)


def missing_glyphs(text: str, drawable: Collection[int]) -> list[str]:
    """The distinct characters of ``text``, in order, whose code point is not in ``drawable``.
    Control characters (line breaks, tabs) are laid out, never drawn, so never missing."""
    return list(
        dict.fromkeys(c for c in text if ord(c) not in drawable and unicodedata.category(c) != "Cc")
    )


def glyph_warning(what: str, chars: list[str], limit: int = MISSING_GLYPHS_LISTED) -> str:
    """The log line naming the characters of ``what`` (a text, in words) that no font here
    can draw, at most ``limit`` of them: "report: warning: the title has characters no font
    here can draw, shown as boxes: '中' (U+4E2D), '😀' (U+1F600)"."""
    named = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars[:limit])
    more = f" and {len(chars) - limit} more" if len(chars) > limit else ""
    return (
        f"report: warning: {what} has characters no font here can draw, shown as boxes: "
        f"{named}{more}"
    )


def glyph_warnings(texts: list[tuple[str, str]], drawable: Collection[int]) -> list[str]:
    """One :func:`glyph_warning` per text with characters outside ``drawable``."""
    return [
        glyph_warning(what, chars)
        for what, text in texts
        if (chars := missing_glyphs(text, drawable))
    ]


def fonts_used() -> str:
    """The log line naming the fonts the report draws in and those it would use where
    installed (said after missing-glyph warnings; call inside the theme)."""
    fonts = [Path(f).name for g, w in REPORT_FACES for f in font_files(g, w)]
    return (
        f"report: fonts used: {', '.join(dict.fromkeys(fonts))}. The report also uses "
        f"these where installed: {', '.join(f for g in FALLBACK_FONTS for f in g)} "
        "(e.g. the Debian packages fonts-noto-cjk, fonts-noto-core, fonts-symbola)"
    )
