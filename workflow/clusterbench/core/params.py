"""Parsing of the ``--params`` JSON object every stage receives (its slice of the config)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
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
        check_keys(raw, allowed, what=what, error=error)
    return raw


def check_keys(
    raw: dict[str, Any],
    allowed: Iterable[str],
    *,
    what: str = "--params",
    error: type[Exception] = ValueError,
) -> None:
    """``error`` naming ``what`` and the unknown keys if ``raw`` has keys beyond ``allowed``."""
    allowed = sorted(allowed)
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise error(f"{what}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")


def read_json_object(
    path: Path,
    what: str,
    *,
    error: type[Exception] = ValueError,
    missing: type[Exception] = FileNotFoundError,
) -> dict[str, Any]:
    """The JSON object in file ``path`` (``what`` says what it is, for the messages)."""
    if not path.is_file():
        raise missing(f"{path}: missing ({what})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: unreadable ({what}): {exc}") from None
    return json_object(text, what=f"{path} ({what})", error=error)
