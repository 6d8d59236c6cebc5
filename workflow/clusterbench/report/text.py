"""The report's words and numbers, as plain strings: numbers, durations and percentages
formatted, counted nouns, lists of names, text wrapped and shortened by columns (wide
characters, CJK and emoji, count as two), the RST a caption is written in for Snakemake's
report.

Pure Python, no drawing: how wide a text is as drawn (and fitting it to the page) is
:mod:`clusterbench.report.layout`'s. User text (titles, run and class names) is drawn literally
everywhere (:func:`clusterbench.report.theme.theme`): nothing here escapes it for the PDF.
"""

from __future__ import annotations

import math
import re
import string
import textwrap
import unicodedata
from typing import Any

import numpy as np

from clusterbench.core import provenance

#: What the report says for a value that was not recorded (provenance of older runs).
UNKNOWN = provenance.UNKNOWN


def plural(n: int, word: str) -> str:
    """'1 run', '3 runs'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def commit_text(commit: str, dirty: Any, digits: int | None = None) -> str:
    """'<sha>', '<sha> (dirty)' or 'unknown'; the sha cut to ``digits`` characters if given."""
    if commit == UNKNOWN or not isinstance(commit, str):
        return UNKNOWN
    dirty = isinstance(dirty, bool | np.bool_) and bool(dirty)  # None: unknown, not dirty
    return (commit[:digits] if digits else commit) + (" (dirty)" if dirty else "")


def fmt_duration(seconds: float) -> str:
    """12.3 s, 4 min 05 s, 1 h 02 min."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def fmt_hours(hours: float) -> str:
    """Device-hours with 2 significant digits (small ones too: a test's 0.0021)."""
    return f"{hours:.2g}" if hours < 100 else f"{hours:.0f}"


def fmt_pct(x: float, digits: int = 2) -> str:
    """0.9623 -> '96.23 %'; 'n/a' without a value."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f} %"


def fmt_ratio(x: float) -> str:
    """'1.07'; 'n/a' without a value."""
    return f"{x:.2f}" if math.isfinite(x) else "n/a"


def fmt_seconds_sd(mean: float, sd: float, n: int | None = None) -> str:
    """Mean epoch time ± sample sd in the mean's unit, with the number of epochs used:
    '0.42 s ± 0.03 (14 ep.)'; 'n/a' without a mean, no ± with a single epoch."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    if sd is None or not math.isfinite(sd):
        text = fmt_duration(mean)
    elif mean < 60:
        digits = 2 if mean < 10 else 1
        if 0 < sd < 10**-digits:  # show at least one significant digit of the sd
            digits = min(3, -math.floor(math.log10(sd)))
        text = f"{mean:.{digits}f} s \u00b1 {sd:.{digits}f}"
    else:
        text = f"{fmt_duration(mean)} \u00b1 {fmt_duration(sd)}"
    return text if n is None else f"{text} ({n} ep.)"


def fmt_number_sd(mean: float, sd: float) -> str:
    """Throughput as '6,900 ± 210'; 'n/a' without a mean."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    return f"{mean:,.0f}" + (f" \u00b1 {sd:,.0f}" if sd is not None and math.isfinite(sd) else "")


def list_runs(names: list[str], limit: int = 6) -> str:
    """'a, b and c'; a long list is cut after ``limit`` names ('a, ..., f and 4 more')."""
    names = list(names)
    if len(names) < 2:
        return "".join(names)
    if len(names) > limit:
        return f"{', '.join(names[:limit])} and {len(names) - limit} more"
    return f"{', '.join(names[:-1])} and {names[-1]}"


def part_of(page_no: int, pages: int) -> str:
    """The suffix of a page's title in a family of pages: ' (2 of 3)'; '' for a single page."""
    return f" ({page_no} of {pages})" if pages > 1 else ""


def char_width(c: str) -> int:
    """Columns a character takes: 2 for East Asian wide and full-width ones (CJK, emoji)."""
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def text_width(text: str) -> int:
    """Columns ``text`` takes on one line (:func:`char_width`)."""
    return sum(map(char_width, text))


def wrap_text(text: str, width: int, **kwargs: Any) -> list[str]:
    """:func:`textwrap.wrap` counting wide characters (CJK, emoji) as two columns. Text with
    such characters is wrapped at spaces and between wide characters (CJK has no spaces), a
    word longer than a line broken inside."""
    if text_width(text) == len(text):
        return textwrap.wrap(text, width, **kwargs)
    units = re.findall(r"\s+|[^\s]", " ".join(text.split()))  # one character per unit
    lines, line, used = [], "", 0
    for unit in units:
        if unit.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        w = char_width(unit)
        if used + w > width and line.strip():
            # a narrow word is moved whole to the next line when it fits there
            start = len(line)
            while (
                w == 1
                and start
                and not line[start - 1].isspace()
                and char_width(line[start - 1]) == 1
            ):
                start -= 1
            keep = line if text_width(line[start:]) >= width else line[:start]
            lines.append(keep.rstrip())
            line = line[len(keep) :].lstrip()
            used = text_width(line)
        line, used = line + unit, used + w
    if line.strip():
        lines.append(line.rstrip())
    return lines


def shorten_text(text: str, width: int, placeholder: str = " [...]") -> str:
    """:func:`textwrap.shorten` counting wide characters as two columns, and cutting a word
    where no space is near (textwrap would leave only the placeholder of a text without
    spaces, such as a CJK title)."""
    text = " ".join(text.split())
    if text_width(text) <= width:
        return text
    short = textwrap.shorten(text, width, placeholder=placeholder)
    if text_width(text) == len(text) and len(short) > len(placeholder.strip()) + width // 2:
        return short
    budget, cut = width - text_width(placeholder), ""
    for c in text:
        if text_width(cut) + char_width(c) > budget:
            break
        cut += c
    head = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return (head if len(head) > len(cut) // 2 else cut).rstrip() + placeholder


def cut_lines(text: str, width: int, max_lines: int) -> list[str]:
    """``text`` wrapped at ``width``, at most ``max_lines`` lines (the last one shortened)."""
    lines = wrap_text(text, width, break_on_hyphens=True) or [text]
    if len(lines) > max_lines:
        rest = " ".join(lines[max_lines - 1 :])
        lines = [*lines[: max_lines - 1], shorten_text(rest, width, placeholder=" ...")]
    return lines


def wrap_label(text: str, width: int = 22) -> str:
    """``text`` wrapped at ``width`` columns; its own line breaks are kept."""
    lines = [w for line in text.split("\n") for w in wrap_text(line, width, break_on_hyphens=True)]
    return "\n".join(lines) or text


def first_lines(wrapped: str, most: int, width: int) -> str:
    """A wrapped label cut to its first ``most`` lines (the last one ending in '...')."""
    lines = wrapped.split("\n")
    if len(lines) <= most:
        return wrapped
    last = shorten_text(" ".join(lines[most - 1 :]), width, placeholder="...")
    return "\n".join([*lines[: most - 1], last])


def rst_literal(text: str) -> str:
    """``text`` as reStructuredText that shows it as it is: every ASCII punctuation character
    escaped (no emphasis, roles, links, lists or section lines made of user text), its lines
    joined into one paragraph."""
    escaped = "".join("\\" + c if c in string.punctuation else c for c in text)
    return " ".join(escaped.split())
