"""The report's look: theme and fonts, number and text formatting, page furniture (:class:`Pages`,
tables, footers)."""

from __future__ import annotations

import contextlib
import math
import re
import textwrap
import unicodedata
from collections.abc import Collection
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from clusterbench import provenance

if TYPE_CHECKING:
    from clusterbench.report.inputs import ReportParams

PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches


TABLE_ROWS_PER_PAGE = 12


NODE_MARKERS = "osD^vP*X"


DIFFERS_COLOR = "#fbd3ad"  # table cells whose provenance differs from the other runs'


#: Smallest height of a table text line unit (points): tables with more lines take more pages.
TABLE_UNIT_PT = 12.5


#: Width of a page's text, between the margins of 3 % of the page width (points).
TEXT_WIDTH_PT = 0.94 * PAGE_SIZE[0] * 72


#: Resolution text widths are measured at (that of the PNG figures; hinting at a lower one
#: widens the text).
MEASURE_DPI = 150


#: Font sizes (points) of a page's title, subtitle and note.
TITLE_PT, SUBTITLE_PT, NOTE_PT = 19, 11, 9.5


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


UNKNOWN = provenance.UNKNOWN


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


def fmt_pct(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f} %"


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def describe_run(row: pd.Series) -> str:
    return (
        f"{row['dataset']}, {row['model']}, {_plural(row['workers'], 'worker')} on "
        f"{_plural(row['nodes'], 'node')}, {row['backend']}"
    )


def describe_series(key: dict[str, Any] | pd.Series) -> str:
    """A scaling series (``BASELINE_KEY``) in words: 'digits / small_cnn, batch 256, cpu,
    horovod, aggregate BN'."""
    extra = "" if key["precision"] == "fp32" else f", {key['precision']}"
    extra += ", channels_last" if key["channels_last"] else ""
    return (
        f"{key['dataset']} / {key['model']}, batch {key['global_batch']}, {key['device']}, "
        f"{key['backend']}, {key['bn']} BN{extra}"
    )


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


def list_runs(names: list[str], limit: int = 6) -> str:
    """'a, b and c'; a long list is cut after ``limit`` names ('a, ..., f and 4 more')."""
    names = list(names)
    if len(names) < 2:
        return "".join(names)
    if len(names) > limit:
        return f"{', '.join(names[:limit])} and {len(names) - limit} more"
    return f"{', '.join(names[:-1])} and {names[-1]}"


def node_marker(i: int) -> dict[str, Any]:
    """Marker style of the i-th node count: the filled markers, then the same ones hollow, and
    so on (cycled: any number of node counts gets a marker)."""
    marker = NODE_MARKERS[i % len(NODE_MARKERS)]
    return {"marker": marker, "hollow": (i // len(NODE_MARKERS)) % 2 == 1}


def run_order(runs_df: pd.DataFrame) -> list[str]:
    """Order runs are listed in on the per-run plots: by dataset, model, workers, nodes, name."""
    return list(runs_df.sort_values(["dataset", "model", "workers", "nodes", "run"])["run"])


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
    """``text`` cut (ending in ' ...') so that it is at most ``max_pt`` points wide as drawn:
    character counts cannot tell how wide CJK, emoji or missing-glyph boxes are."""
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
    """``text`` wrapped at ``columns`` (:func:`wrap_text`), then narrower where a line drawn
    at ``size`` points is wider than ``max_pt``; at most ``max_lines`` lines (the last one
    cut, :func:`fit_line`)."""
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


def wrap_label(text: str, width: int = 22) -> str:
    """``text`` wrapped at ``width`` columns; its own line breaks are kept."""
    lines = [w for line in text.split("\n") for w in wrap_text(line, width, break_on_hyphens=True)]
    return "\n".join(lines) or text


#: The most tick-label lines a category axis holds (a page's height at 6 pt).
CATEGORY_LINES = 60


def set_category_ticks(ax, labels: list[str], colors: list | None = None, width: int = 24) -> None:
    """Categories 0..n-1 top to bottom on the y axis, labels wrapped and sized to fit (wider,
    then cut to fewer lines each, where many long labels would overprint); a short list gets
    extra room so that its bars do not fill the whole height."""
    for columns in dict.fromkeys((width, max(width, 32), max(width, 40))):
        wrapped = [wrap_label(label, columns) for label in labels]
        lines = sum(w.count("\n") + 1 for w in wrapped)
        if lines <= CATEGORY_LINES:
            break
    if lines > CATEGORY_LINES:
        most = max(1, CATEGORY_LINES // len(labels))
        wrapped = [_first_lines(w, most, columns) for w in wrapped]
        lines = sum(w.count("\n") + 1 for w in wrapped)
    ax.set_yticks(range(len(labels)), wrapped, fontsize=max(6.0, min(10.5, 300 / lines)))
    for tick, color in zip(ax.get_yticklabels(), colors or [], strict=False):
        tick.set_color(color)
    pad = max(0.0, (3 - len(labels)) / 2)
    ax.set_ylim(len(labels) - 0.5 + pad, -0.5 - pad)
    ax.grid(axis="y", visible=False)


def _first_lines(wrapped: str, most: int, width: int) -> str:
    """A wrapped label cut to its first ``most`` lines (the last one ending in '...')."""
    lines = wrapped.split("\n")
    if len(lines) <= most:
        return wrapped
    last = shorten_text(" ".join(lines[most - 1 :]), width, placeholder="...")
    return "\n".join([*lines[: most - 1], last])


def table_budget(header: list[str], top: float = 0.8, bottom: float = 0.06) -> float:
    """The line units (:func:`table_units`) of body rows a table from ``top`` to ``bottom``
    (figure fractions) holds under ``header`` at the smallest row height; for
    :func:`chunk_rows`."""
    return (top - bottom) * PAGE_SIZE[1] * 72 / TABLE_UNIT_PT - table_units(header)


class Pages:
    """Builds the report's figures with one consistent style; each page is an A4 figure."""

    def __init__(self, params: ReportParams, runs_df: pd.DataFrame) -> None:
        import seaborn as sns

        self.sns = sns
        self.params = params
        self.order = run_order(runs_df)
        colors = sns.color_palette("tab10" if len(self.order) <= 10 else "husl", len(self.order))
        self.colors = dict(zip(self.order, colors, strict=True))
        self.pages: list[tuple[str | None, Any]] = []  # (png name or None, Figure)
        #: Said after the subtitle of the pages made while it is set (:meth:`subset`).
        self.subset_note: str | None = None

    def new(
        self,
        title: str,
        subtitle: str | None = None,
        png: str | None = None,
        note: str | None = None,
        layout: str | None = "constrained",
    ):
        """A new page: bold title, grey subtitle (wrapped), optional note above the footer."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=PAGE_SIZE, layout=layout)
        title = fit_line(shorten_text(title, 80, placeholder=" ..."), TITLE_PT, "bold")
        fig.text(0.03, 0.955, title, fontsize=TITLE_PT, weight="bold", va="center")
        top = 0.92
        if subtitle and self.subset_note:
            subtitle = f"{subtitle} {self.subset_note}"
        if subtitle:
            lines = self.subtitle_lines(subtitle)
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
        self.pages.append((png, fig))
        return fig

    @contextlib.contextmanager
    def subset(self, note: str | None, runs: list[str] | None = None):
        """Pages made inside show only ``runs`` (in the report's order; None: every run) and
        say ``note`` after their subtitle."""
        order = self.order
        self.subset_note = note
        if runs is not None:
            self.order = [name for name in order if name in set(runs)]
        try:
            yield
        finally:
            self.subset_note, self.order = None, order

    @staticmethod
    def subtitle_lines(subtitle: str) -> list[str]:
        """The lines of a page's subtitle: at most 4, each within the page's width."""
        return fit_wrap(subtitle, 135, SUBTITLE_PT, max_lines=4)

    @staticmethod
    def note_lines(note: str | None) -> list[str]:
        """The lines of a page's note (its own lines wrapped within the page's width)."""
        return [w for line in (note or "").split("\n") for w in fit_wrap(line, 150, NOTE_PT)]

    def run_axis(self, ax, names: list[str]) -> None:
        """Horizontal per-run axis: wrapped run names as tick labels, coloured like their run."""
        set_category_ticks(ax, names, [self.colors[n] for n in names])

    @staticmethod
    def note(ax, text: str) -> None:
        ax.set_axis_off()
        ax.text(
            0.5,
            0.5,
            text,
            ha="center",
            va="center",
            fontsize=12,
            color="0.35",
            wrap=True,
            transform=ax.transAxes,
        )


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


#: The font size of a table's body cells (points; :func:`draw_table`).
TABLE_FONT_PT = 9.5


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


def _cut_lines(text: str, width: int, max_lines: int) -> list[str]:
    """``text`` wrapped at ``width``, at most ``max_lines`` lines (the last one shortened)."""
    lines = wrap_text(text, width, break_on_hyphens=True) or [text]
    if len(lines) > max_lines:
        rest = " ".join(lines[max_lines - 1 :])
        lines = [*lines[: max_lines - 1], shorten_text(rest, width, placeholder=" ...")]
    return lines


def _epoch_axis(ax, epochs: pd.Series) -> None:
    """Integer epoch ticks; a run of one or two epochs gets a half-epoch margin each side."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("Epoch")
    lo, hi = int(epochs.min()), int(epochs.max())
    if hi - lo < 3:
        ax.set_xticks(range(lo, hi + 1))
        ax.set_xlim(lo - 0.5, hi + 0.5)


def _log_ticks(axis, lo: float, hi: float) -> None:
    """Log-axis ticks labelled as plain numbers (0.2, 1, 50): at 1, 2, 5 x 10^k over a short
    range ``lo..hi``, at powers of ten over a long one."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


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


def pdf_metadata(params: ReportParams, prov: dict[str, Any]) -> dict[str, str]:
    return {
        "Title": params.title,
        "Author": params.author or "clusterbench",
        "Subject": f"clusterbench report; config {params.config_hash}; "
        f"commit {provenance.describe_commit(prov['git'])}",
        "Creator": "clusterbench.report",
    }
