"""Parsing of the ``--params`` JSON object every stage receives (its slice of the config)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def json_object(
    text: str,
    *,
    allowed: Iterable[str] | None = None,
    what: str = "--params",
    error: type[Exception] = ValueError,
) -> dict[str, Any]:
    """``text`` as a JSON object; ``error`` naming ``what`` if it is not one or has unknown keys."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise error(f"{what} must be a JSON object, got {raw!r}")
    if allowed is not None:
        allowed = sorted(allowed)
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise error(f"{what}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")
    return raw
