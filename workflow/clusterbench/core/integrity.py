"""Check a stage's files on disk against the checksums recorded when they were written.

Snakemake notices a missing output, not a damaged one: a truncated ``train_x.npy`` only makes
the steps after it stale, which then fail (or worse, use it), and Snakemake removes a job's
outputs before it runs, so a job that then fails on a damaged input loses good outputs. The
download records each raw file's sha256 in ``MANIFEST.json``, the preprocess step each array's
in ``meta.json`` (``files``), and the train and evaluate steps their files' in a
``checksums.json`` beside them (:func:`write_checksums`, written last: :data:`RUN_FILES`,
:data:`EVAL_FILES`). The workflow checks them before any job starts
(:mod:`clusterbench.pipeline.checks`), and the stages check their inputs again before use. A
damaged array or run output is named with the command that makes it again; a damaged raw file
makes the workflow set its manifest aside (:func:`set_aside`), so that Snakemake runs the
download again.

The workflow checks at every invocation: :class:`DigestCache` keeps each file's sha256 with
its size, modification and change times, so an unchanged file is not read again.

Only the standard library: the Snakefile imports this module.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterbench.core.atomic import write_json

#: What os.link raises where the file system has no hard links.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV}


#: The record of a train or evaluate step's files, beside them, written last.
CHECKSUMS = "checksums.json"
#: The files of ``results/runs/<run>/`` its ``checksums.json`` records (what later steps read).
RUN_FILES = ("run.json", "metrics.jsonl", "model.pt")
#: The files of ``results/eval/<run>/`` its ``checksums.json`` records.
EVAL_FILES = ("per_class.csv", "confusion.csv", "metrics.json")


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


#: The pieces a large preprocessed file's record also has the sha256 of, one by one
#: (:func:`record_with_blocks`): a file's sha256 is one stream, hashed on one core; its blocks'
#: can be checked on several at once (node-local staging: clusterbench.data.staging). 16 MiB:
#: the last block's hash, which nothing overlaps, is short (staging 256 MiB on 2 cores: 0.60
#: of cp's speed from the page cache, 0.81 from disk, against 0.55 and 0.70 with 64 MiB), and
#: a 100 GB file's record holds 6,000 of them (400 KB of meta.json).
BLOCK = 16 << 20


def record_with_blocks(path: Path, block: int | None = None) -> dict[str, Any]:
    """:func:`record`; for a file over ``block`` bytes (default :data:`BLOCK`) also ``"block"``
    (that size) and ``"blocks"`` (the sha256 of each ``block`` bytes in turn, the last one
    shorter). The file is read once."""
    block = block or BLOCK
    whole = hashlib.sha256()
    blocks = []
    with open(path, "rb") as fh:
        while piece := fh.read(block):
            whole.update(piece)
            blocks.append(hashlib.sha256(piece).hexdigest())
    found = {"size": path.stat().st_size, "sha256": whole.hexdigest()}
    if len(blocks) > 1:
        found.update(block=block, blocks=blocks)
    return found


def write_checksums(folder: Path, names: tuple[str, ...] | list[str]) -> Path:
    """Record the size and sha256 of each file ``names`` in ``folder`` in ``folder``'s
    :data:`CHECKSUMS` (``{"files": {name: {"size", "sha256"}}}``, atomically), and return its
    path. The step's last write: once it is there, the files are complete as recorded."""
    folder = Path(folder)
    path = folder / CHECKSUMS
    write_json(path, {"files": {name: record(folder / name) for name in names}})
    return path


class DigestCache:
    """The sha256 of files, remembered in the JSON file ``path`` (None: in memory only) by their
    absolute path with the size, inode, modification and change time they had when hashed.

    A file written again gets a new change time (``st_ctime_ns``, which no ``touch`` or
    ``os.utime`` can set back), so it is hashed again even if its size and modification time
    are restored. An unreadable cache file counts as empty: it only saves time.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        self.changed = False
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                loaded = None
            if isinstance(loaded, dict):
                self.entries = {k: v for k, v in loaded.items() if isinstance(v, list)}

    @staticmethod
    def _key(stat: os.stat_result) -> list[int]:
        return [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns]

    def sha256(self, path: Path) -> str:
        """``path``'s sha256: remembered if the file is unchanged, else read (and remembered)."""
        name = os.path.abspath(path)
        key = self._key(os.stat(path))
        entry = self.entries.get(name)
        if entry is not None and entry[:-1] == key:
            return entry[-1]
        digest = sha256_of(path)
        if key == self._key(os.stat(path)):  # not changing while it was read
            self.entries[name] = [*key, digest]
            self.changed = True
        return digest

    def save(self) -> None:
        """Write the cache (atomically) if it changed; entries of files gone are dropped."""
        if self.path is None or not self.changed:
            return
        kept = {name: entry for name, entry in self.entries.items() if os.path.isfile(name)}
        try:
            write_json(self.path, kept)
        except OSError:
            return  # a cache that cannot be written only costs time
        self.changed = False


def problems(
    folder: Path, files: Mapping[str, Mapping[str, Any]], cache: DigestCache | None = None
) -> list[str]:
    """Each file of ``files`` (name -> its record) in ``folder`` (or at the record's own
    ``path``: a download's manifest records where each file is) that is missing or differs;
    ``cache`` remembers the digests of unchanged files."""
    found = []
    for name, expected in sorted(files.items()):
        path = Path(expected["path"]) if expected.get("path") else folder / name
        if not path.is_file():
            found.append(f"{path} is missing")
            continue
        size = path.stat().st_size
        if "size" in expected and size != expected["size"]:
            found.append(f"{path} has {size} bytes, {expected['size']} were written")
        elif "sha256" in expected:
            try:
                digest = sha256_of(path) if cache is None else cache.sha256(path)
            except OSError as exc:
                found.append(f"{path} cannot be read ({exc.strerror or exc})")
                continue
            if digest != expected["sha256"]:
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


def recorded_problems(
    marker: Path,
    key: str,
    prefix: str = "",
    cache: DigestCache | None = None,
    strict: bool = False,
) -> list[str]:
    """Each file recorded under ``key`` in ``marker`` (next to it; those whose name starts with
    ``prefix``) that is missing or damaged (see :func:`problems`). With ``strict``, a marker
    that exists but records no ``key`` object (damaged itself) is a problem too."""
    files = _recorded(marker, key)
    if files is None:
        if strict and os.path.lexists(marker):
            return [f"{marker} records no {key!r} (not the JSON the stage wrote)"]
        return []
    chosen = {k: v for k, v in files.items() if k.startswith(prefix)}
    return problems(marker.parent, chosen, cache)


def check(
    marker: Path, key: str, remedy: str, prefix: str = "", cache: DigestCache | None = None
) -> None:
    """Raise :class:`DamagedFile` if a file recorded under ``key`` in ``marker`` (next to it;
    those whose name starts with ``prefix``) is missing or damaged; ``remedy`` is the command
    that writes them again."""
    found = recorded_problems(marker, key, prefix, cache)
    if found:
        raise DamagedFile(
            "; ".join(found) + f" (checked against {marker}). Make it again with: {remedy}"
        )


def set_aside(marker: Path, suffix: str = ".damaged") -> Path:
    """Rename ``marker`` to ``<marker><suffix>`` (``<suffix>.2``, ... if taken: nothing is ever
    overwritten or deleted) and return the new path. A missing marker alone does not make
    Snakemake 9 rerun its job while the jobs after it are complete: the caller also forces it
    (:meth:`clusterbench.pipeline.checks.Checks.raw_files`).

    Atomic: a hard link under the new name, then the old name removed; where the file system
    has no hard links, a rename to a name that was free just before.
    """
    for number in itertools.count(1):
        aside = _aside_name(marker, suffix, number)
        try:
            os.link(marker, aside)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            if os.path.lexists(aside):
                continue
            os.rename(marker, aside)
            return aside
        os.unlink(marker)
        return aside
    raise AssertionError("unreachable")


def _aside_name(marker: Path, suffix: str, number: int) -> Path:
    return marker.with_name(marker.name + suffix + ("" if number == 1 else f".{number}"))


def next_aside(marker: Path, suffix: str = ".damaged") -> Path:
    """The name :func:`set_aside` would give ``marker`` now."""
    for number in itertools.count(1):
        aside = _aside_name(marker, suffix, number)
        if not os.path.lexists(aside):
            return aside
    raise AssertionError("unreachable")


def set_aside_copies(marker: Path, suffix: str = ".damaged") -> list[Path]:
    """The copies :func:`set_aside` made of ``marker``, oldest first."""
    found = []
    for path in marker.parent.glob(f"{marker.name}{suffix}*"):
        number = path.name[len(marker.name + suffix) :]
        if number == "":
            found.append((1, path))
        elif number[:1] == "." and number[1:].isdigit():
            found.append((int(number[1:]), path))
    return [path for _, path in sorted(found)]


def remake_command(*paths: Path | str) -> str:
    """What makes a stage's damaged files again: force the stage that writes ``paths`` (any of
    its outputs, e.g. the record the files are checked against), and so what follows. The
    workflow's checks before any job pass over the outputs of a forced job: nothing needs
    removing first."""
    return f"{forcerun_command(*paths)} <your usual options>"


def _relative(path: Path | str) -> str:
    text = str(path)
    if Path(text).is_absolute():
        here = Path.cwd()
        absolute = Path(os.path.abspath(text))
        if absolute.is_relative_to(here):
            text = str(absolute.relative_to(here))
    return text


def forcerun_command(*paths: Path | str) -> str:
    """The Snakemake command that makes ``paths`` (outputs of this workflow) again, and
    everything that depends on them: ``snakemake --forcerun results/runs/RUN/model.pt``.

    A path is the one the rule passed (relative to the workflow's working directory, with the
    module prefix if any); an absolute path under the current directory is made relative, as
    Snakemake matches ``--forcerun`` files against its relative output paths.
    """
    return "snakemake --forcerun " + " ".join(shlex.quote(_relative(path)) for path in paths)
