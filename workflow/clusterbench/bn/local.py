"""``bn: local``: every worker normalises with, and keeps running statistics of, its own shard."""

from __future__ import annotations

from typing import Any

DESCRIPTION = "each worker's own shard's statistics; running statistics differ across ranks"
ELASTIC = None


def prepare(model: Any, runtime: Any, device: Any) -> Any:
    return model


def aggregator(model: Any) -> None:
    return None
