"""Check a stage's files on disk against the checksums recorded when they were written.

Snakemake notices a missing output, not a damaged one: a truncated ``train_x.npy`` only makes
the steps after it stale, which then fail (or worse, use it). The download records each raw
file's sha256 in ``MANIFEST.json`` and the preprocess step each array's in ``meta.json``
(``files``). The workflow checks them before any job starts (rules/common.smk), and the stages
check their inputs again before use; a damaged file is named with the command that makes it
again.

Only the standard library: the Snakefile imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class DamagedFile(ValueError):
    """A file differs from its recorded checksum (or is missing); the message says what to run."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def record(path: Path) -> dict[str, Any]:
    """What :func:`problems` checks a file against: ``{"size", "sha256"}``."""
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


def problems(folder: Path, files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each file of ``files`` (name -> its record) in ``folder`` that is missing or differs."""
    found = []
    for name, expected in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            found.append(f"{path} is missing")
            continue
        size = path.stat().st_size
        if "size" in expected and size != expected["size"]:
            found.append(f"{path} has {size} bytes, {expected['size']} were written")
        elif "sha256" in expected and sha256_of(path) != expected["sha256"]:
            found.append(f"{path} differs from what was written (sha256)")
    return found


def _recorded(marker: Path, key: str) -> dict[str, Any] | None:
    """The ``key`` object of the JSON file ``marker``; None if there is no such file or key (a
    marker of an older version, or none yet: nothing to check)."""
    try:
        content = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = content.get(key) if isinstance(content, dict) else None
    return value if isinstance(value, dict) else None


def check(marker: Path, key: str, remedy: str, prefix: str = "") -> None:
    """Raise :class:`DamagedFile` if a file recorded under ``key`` in ``marker`` (next to it;
    those whose name starts with ``prefix``) is missing or damaged; ``remedy`` is the command
    that writes them again."""
    files = _recorded(marker, key)
    if files is None:
        return
    found = problems(marker.parent, {k: v for k, v in files.items() if k.startswith(prefix)})
    if found:
        raise DamagedFile(
            "; ".join(found) + f" (checked against {marker}). Make it again with: {remedy}"
        )


def remake_command(marker: Path | str) -> str:
    """What makes a stage's damaged files again: remove their marker (MANIFEST.json,
    meta.json), which the workflow checks them against before any job, and force the stage
    that writes it (and so what follows)."""
    path = shlex.quote(_relative(marker))
    return f"rm {path} && snakemake --forcerun {path} <your usual options>"


def _relative(path: Path | str) -> str:
    text = str(path)
    if Path(text).is_absolute():
        here = Path.cwd()
        absolute = Path(os.path.abspath(text))
        if absolute.is_relative_to(here):
            text = str(absolute.relative_to(here))
    return text


def forcerun_command(path: Path | str) -> str:
    """The Snakemake command that makes ``path`` (an output of this workflow) again, and
    everything that depends on it: ``snakemake --forcerun results/runs/RUN/model.pt``.

    ``path`` is the one the rule passed (relative to the workflow's working directory, with
    the module prefix if any); an absolute path under the current directory is made relative,
    as Snakemake matches ``--forcerun`` files against its relative output paths.
    """
    return f"snakemake --forcerun {shlex.quote(_relative(path))}"
