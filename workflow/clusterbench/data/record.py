"""``run.json``'s ``data``: how the run read its data, from every rank's facts.

Each rank's data source gives its own (``describe()``: resident or streamed, the augmentation,
loader processes, seconds waited for batches, files skipped) and the train stage adds how
``loading`` was decided and this node's staging (``facts``). At the end of training every
rank's record is gathered and merged (:func:`merge`): rank 0's, the files any rank skipped,
and one staging entry per node.

Only the standard library: the training loop imports it for any data source (one without
``describe`` records nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Most skipped files named in ``run.json`` (every one is counted).
NAMED_SKIPS = 50
#: Staging actions, the work first: a node's entry is its rank that did the most.
STAGING_ACTIONS = ("copied", "verified", "reused")


def rank_record(data: Any) -> dict[str, Any]:
    """This rank's part of ``run.json``'s ``data``: its source's ``describe()`` and ``facts``
    (the loading decision and the node's staging), where the source has them."""
    describe = getattr(data, "describe", None)
    return {**(describe() if describe is not None else {}), **getattr(data, "facts", {})}


def merge(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``run.json``'s ``data`` from every rank's :func:`rank_record` (rank 0's first)."""
    if not records or not records[0]:
        return {}
    merged = {k: v for k, v in records[0].items() if k not in ("skipped", "staging")}
    skipped: dict[str, str] = {}
    for record in records:
        skipped.update(record.get("skipped") or {})
    if any("skipped" in record for record in records):
        merged["skipped_files"] = len(skipped)
        merged["skipped"] = dict(sorted(skipped.items())[:NAMED_SKIPS])
    staged = [r["staging"] for r in records if r.get("staging")]
    if staged:
        merged["staging"] = node_staging(staged)
    return merged


def node_staging(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One staging entry per node (the rank of it that did the most: copied, else verified,
    else reused) and their totals: ``{"dir", "bytes", "seconds", "nodes": [...]}``."""
    by_node: dict[str, dict[str, Any]] = {}
    for entry in entries:
        kept = by_node.get(entry["node"])
        if kept is None or _work(entry) < _work(kept):
            by_node[entry["node"]] = entry
    nodes = [by_node[n] for n in sorted(by_node)]
    return {
        "dir": nodes[0]["dir"],
        "bytes": sum(n["bytes"] for n in nodes if n["action"] == "copied"),
        "seconds": max(n["seconds"] for n in nodes),
        "nodes": nodes,
    }


def _work(entry: dict[str, Any]) -> int:
    action = entry.get("action")
    return STAGING_ACTIONS.index(action) if action in STAGING_ACTIONS else len(STAGING_ACTIONS)
