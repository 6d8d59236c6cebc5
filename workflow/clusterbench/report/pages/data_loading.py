"""How each run read its data, part of the runs' provenance: resident or streamed and why
(``loading``), the storage, augmentation and loader processes, the share of the training time
spent waiting for batches, the image files skipped as unreadable, and the node-local staging
(directory, bytes copied, seconds, and per node whether it copied, verified or reused a copy).
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
    "of the training time its rank 0 waited for the next batch (streamed runs); the image "
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


def wait_share(data: dict[str, Any], epochs: Any) -> str:
    """Seconds rank 0 waited for batches over its epochs' training seconds."""
    waits = {int(k): v for k, v in (data.get("wait_seconds") or {}).items()}
    timed = epochs[epochs["epoch"].isin(list(waits))]
    total = float(timed["epoch_seconds"].sum())
    if not waits or total <= 0:
        return "-"
    return fmt_pct(sum(waits[int(e)] for e in timed["epoch"]) / total, 1)


def staging_text(staging: dict[str, Any] | None) -> str:
    if not staging:
        return "none"
    nodes = staging.get("nodes") or []
    lines = [f"{gib(staging['bytes'])} copied, {fmt_duration(staging['seconds'])}"]
    lines += [f"{n['node']}: {n['action']}" for n in nodes[:2]]
    if len(nodes) > 2:
        lines.append(f"+ {plural(len(nodes) - 2, 'more node')}")
    return "\n".join([*lines, staging["dir"]])  # the directory last: a long one is cut


def row(name: str, data: dict[str, Any], epochs: Any) -> list[str]:
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
        wait_share(data, epochs) if loading.get("decision") == "stream" else "-",
        cell_text(skip_text, COLUMNS[4][1], max_lines=4),
        cell_text(staging_text(data.get("staging")), COLUMNS[5][1], max_lines=6),
    ]


def draw(ctx: Context) -> None:
    rows = []
    for name in ctx.runs_df["run"]:
        run = ctx.run_data(name)
        data = run.info.get("data") or {}
        if shown(data):
            rows.append(row(name, data, run.epochs))
    if rows:
        table_pages(ctx.book, "How the runs read their data", CAPTION, COLUMNS, rows)
