"""How each run read its data, part of the runs' provenance: resident or streamed and why
(``loading``), the storage, augmentation and loader processes, the share of the step time
spent waiting for batches (the step-time breakdown's: runs.csv's ``data_share``), the image
files skipped as unreadable, and the node-local staging (directory, bytes copied, seconds, and
per node whether it copied, verified or reused a copy).
No page when every run was resident, staged nothing and skipped nothing (run.json's ``data``:
:mod:`clusterbench.data.record`)."""

from __future__ import annotations

from typing import Any

from clusterbench.data.loading import gib
from clusterbench.report.context import Context
from clusterbench.report.table_pages import cell_text, table_pages
from clusterbench.report.text import fmt_duration, fmt_pct, plural

ORDER = 85

#: Columns: (header, relative width, right-aligned).
COLUMNS = (
    ("Run", 0.14, False),
    ("Loading\n(why)", 0.26, False),
    ("Storage, augment,\nloader processes", 0.14, False),
    ("Waiting for\ndata", 0.09, True),
    ("Skipped\nfiles", 0.1, False),
    ("Node-local staging", 0.27, False),
)

CAPTION = (
    "How each run read its data: every rank holding it in memory (resident) or reading its "
    "share of each batch from disk through loader processes (stream), and why (loading: auto "
    "decides by the memory the ranks' copies need); the storage (arrays, or an image folder's "
    "files decoded per batch), the augmentation and the loader processes per rank; the share "
    "of the step time the ranks waited for the next batch (streamed runs: the step-time "
    "breakdown's data phase); the image "
    "files it left out as unreadable (on_bad_file: skip); and the node-local copy it read "
    "(staging.dir): where, the bytes copied and the seconds, and per node whether a rank "
    "copied it, verified a copy an earlier run left, or reused the copy another rank made."
)


def shown(data: dict[str, Any]) -> bool:
    """Whether a run's ``data`` is worth a row: streamed, staged or with files skipped."""
    loading = data.get("loading") or {}
    return bool(
        loading.get("decision") == "stream" or data.get("staging") or data.get("skipped_files")
    )


def staging_text(staging: dict[str, Any] | None) -> str:
    if not staging:
        return "none"
    nodes = staging.get("nodes") or []
    lines = [f"{gib(staging['bytes'])} copied, {fmt_duration(staging['seconds'])}"]
    lines += [f"{n['node']}: {n['action']}" for n in nodes[:2]]
    if len(nodes) > 2:
        lines.append(f"+ {plural(len(nodes) - 2, 'more node')}")
    return "\n".join([*lines, staging["dir"]])  # the directory last: a long one is cut


def row(name: str, data: dict[str, Any], data_share: float) -> list[str]:
    loading = data.get("loading") or {}
    workers = data.get("loader_workers")
    how = ", ".join(
        [data.get("storage", "arrays"), f"augment {data.get('augment', 'none')}"]
        + ([plural(workers, "loader")] if workers is not None else [])
    )
    skipped = data.get("skipped_files") or 0
    skip_text = plural(skipped, "file") if skipped else "none"
    if skipped:  # by their names in the archive, where run.json gives them
        names = [n.rsplit("(archive member ", 1)[-1].rstrip(")") for n in data.get("skipped") or {}]
        skip_text += "\n" + "\n".join(names[:2])
    return [
        cell_text(name, COLUMNS[0][1]),
        cell_text(f"{loading.get('decision', '?')}: {loading.get('reason', '')}", COLUMNS[1][1]),
        cell_text(how, COLUMNS[2][1]),
        fmt_pct(data_share, 1) if loading.get("decision") == "stream" else "-",
        cell_text(skip_text, COLUMNS[4][1], max_lines=4),
        cell_text(staging_text(data.get("staging")), COLUMNS[5][1], max_lines=6),
    ]


def draw(ctx: Context) -> None:
    rows = []
    shares = ctx.runs_df.set_index("run")["data_share"] if "data_share" in ctx.runs_df else {}
    for name in ctx.runs_df["run"]:
        data = ctx.run_data(name).info.get("data") or {}
        if shown(data):
            rows.append(row(name, data, float(shares.get(name, float("nan")))))
    if rows:
        table_pages(ctx.book, "How the runs read their data", CAPTION, COLUMNS, rows)
