"""The one error type for bad settings, and how a key is named in every message.

Every stage's ``main`` turns :class:`ConfigError` into :data:`EXIT_BAD_SETTINGS` with its
message alone (:func:`bad_settings`); messages name a key by its path (:func:`key_path`). A
failure of the work itself (a damaged file, a failed download) is no ConfigError: it exits 1, or
raises.
Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """Bad settings (the config, or a stage's ``--params``); the message names the offending key.

    The one error type for bad settings: every stage's ``main`` turns it into
    :data:`EXIT_BAD_SETTINGS`.
    """


#: Exit status of every stage whose settings are invalid (a failure of the work itself is 1).
EXIT_BAD_SETTINGS = 2


def bad_settings(stage: str, exc: ConfigError) -> int:
    """Report ``exc`` for ``stage`` on stderr; the exit status of a stage with bad settings."""
    print(f"{stage}: error: {exc}", file=sys.stderr)
    return EXIT_BAD_SETTINGS


def key_path(parts: Iterable[Any]) -> str:
    """``runs[0].epochs``: list indices in brackets, keys dotted (``<top level>`` for none)."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"
