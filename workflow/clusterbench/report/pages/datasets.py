"""Where each dataset the runs trained on is read from, and what the workflow added for it:
in place (a folder, or an archive verified against its sha256, neither copied), from the
download cache (the one copy of a downloaded file), or the workflow's own copy (an extracted
``.tar.gz``, arrays decoded once); its images (or files) and bytes; its splits; and the bytes
the workflow wrote on the shared file system for it (``results/raw`` holds the manifest alone;
``results/data`` the index or the arrays; the cache the download), with their share of the
data. No page when no dataset says (a synthetic one's has nothing to say; older records do not
tell).
"""

from __future__ import annotations

from typing import Any

from clusterbench.data.loading import gib
from clusterbench.report.context import Context
from clusterbench.report.table_pages import cell_text, table_pages
from clusterbench.report.text import plural

ORDER = 84

#: Columns: (header, relative width, right-aligned).
COLUMNS = (
    ("Dataset", 0.12, False),
    ("Read from", 0.28, False),
    ("Data", 0.22, False),
    ("Splits\n(train / val / test)", 0.14, False),
    ("Added on the shared\nfile system", 0.24, False),
)

CAPTION = (
    "Where each dataset is read from: in place (a folder, or a file:// archive verified "
    "against its sha256: nothing copied), or the download cache (the one copy of a download; "
    "results/raw holds its manifest alone). Its images and bytes, its splits, and the bytes "
    "the workflow wrote for it on the shared file system (an index, or decoded arrays, or a "
    ".tar.gz's extracted images; the cache's copy), with their share of the data."
)


def read_from(meta: dict[str, Any]) -> str:
    source = meta.get("source") or {}
    kind, where = source.get("kind"), source.get("where") or "?"
    stored = source.get("stored")
    if kind == "folder":
        said = f"in place: the folder {where}"
    elif kind == "archive":
        said = (
            f"download cache: {where}, its members read in place"
            if stored == "cache"
            else f"in place: the archive {where} (sha256 verified)"
        )
    elif kind == "copy":
        origin = "the download cache" if stored == "cache" else "in place"
        said = f"extracted into results/data from {where} ({origin}): a .tar.gz"
    elif kind == "download":
        said = f"download cache: {where}, decoded into arrays"
    elif kind == "in place":
        said = f"in place: {where}, decoded into arrays"
    else:
        return "-"
    return said + (f"\n{source['url']}" if source.get("url") and stored == "cache" else "")


def data_text(meta: dict[str, Any]) -> str:
    source = meta.get("source") or {}
    if meta.get("storage") == "files":
        text = f"{plural(int(source.get('images', 0)), 'image')}, {gib(meta.get('bytes', 0))}"
    else:
        text = f"{plural(int(source.get('files', 0)), 'file')}, {gib(source.get('bytes', 0))}"
    left = source.get("left_out") or {}
    if not isinstance(left, dict) or not left:
        return text
    counts = ", ".join(
        f"{int(e.get('count', 0)):,} {SHORT.get(why, why)}" for why, e in left.items()
    )
    return f"{text}\nleft out: {counts}"


#: What was left out, in a few words (clusterbench.data.scan's reasons).
SHORT = {
    "operating-system file(s)": "OS files",
    "file(s) beside the class folders": "beside the classes",
    "link(s) or special member(s)": "links",
}


def added(meta: dict[str, Any]) -> tuple[int, str]:
    """The bytes added for the dataset on the shared file system, and how they split."""
    parts = dict(meta.get("added") or {})
    written = int(meta.get("dir_bytes") or 0)  # results/data/<name>: index or arrays, meta.json
    cache = int(parts.get("cache", 0))
    total = written + cache
    base = int(meta.get("bytes") or (meta.get("source") or {}).get("bytes") or 0)
    share = f" ({100 * total / base:.1f} % of the data)" if base else ""
    lines = [f"{gib(total)}{share}", f"results/data: {gib(written)}"]
    if parts.get("copies"):
        lines[-1] += " (extracted images)"
    elif parts.get("arrays"):
        lines[-1] += " (arrays)"
    if cache:
        lines.append(f"download cache: {gib(cache)}")
    return total, "\n".join(lines)


def row(meta: dict[str, Any]) -> list[str]:
    counts = meta.get("counts") or {}
    splits = " / ".join(f"{int(counts.get(s, 0)):,}" for s in ("train", "val", "test"))
    storage = meta.get("storage") or "arrays"
    return [
        cell_text(f"{meta.get('dataset', '?')}\n{storage}", COLUMNS[0][1]),
        cell_text(read_from(meta), COLUMNS[1][1], max_lines=4),
        cell_text(data_text(meta), COLUMNS[2][1], max_lines=4),
        splits,
        cell_text(added(meta)[1], COLUMNS[4][1], max_lines=4),
    ]


def draw(ctx: Context) -> None:
    rows = [row(meta) for meta in ctx.datasets if meta.get("source")]
    if rows:
        table_pages(ctx.book, "Where the data is read from", CAPTION, COLUMNS, rows)
