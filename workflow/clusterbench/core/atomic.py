"""Atomic output writing: a temp file in the destination directory, fsync, then rename.

A reader (or Snakemake's output check) never sees a half-written file, and a crash leaves at most a
hidden ``.<name>.<random>.tmp`` file behind, never a truncated output under the real name.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells (``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, and set it back at once
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it onto ``dest`` if the block succeeds.

    The file gets the mode an ordinary ``open()`` would give it (0666 less the umask), not
    mkstemp's 0600: on a shared cluster the group must be able to read the results.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, dest)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """``open()`` replacement whose result appears under ``dest`` only when the block succeeds."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open only writes, got mode {mode!r}")
    with atomic_path(dest) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


def write_json(dest: str | os.PathLike[str], obj: Any) -> None:
    with atomic_open(dest, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")


def write_text(dest: str | os.PathLike[str], text: str) -> None:
    with atomic_open(dest, "w", encoding="utf-8") as fh:
        fh.write(text)
