"""Whether the data an index reads in place changed since it was indexed, and how: asked at
every invocation of the workflow (:meth:`clusterbench.pipeline.checks.Checks.in_place`), dry
runs included, so it must be cheap.

* **Archives** read in place (a ``.zip``, ImageNet's tars): their size and modification time
  against the index's record (one ``stat`` each). A ``file://`` archive is also checked
  against its sha256 by the download's manifest (:meth:`Checks.raw_files`).
* **Folders:** every folder's modification time (one ``stat`` per folder: 1,000-odd for
  ImageNet), which changes whenever an entry is added to it, removed or renamed (and so when
  ``rsync``, ``tar`` or a download replaces a file: they write a new one and rename it). In a
  folder that changed, its files are listed again and compared with the index: files added,
  removed, or of another size or modification time.
* **Every image's bytes** with ``check: content``: after every file's size and time, and only
  where they found no change, every image is read and hashed against the sha256 its index
  recorded (:mod:`clusterbench.data.content`): what catches a file rewritten, or two swapped,
  with their sizes and times put back. It reads all of the data at every invocation.
* **Every file's size and modification time** (one ``stat`` each) with ``check: files``, or
  ``auto`` up to :data:`clusterbench.config.CHECK_FILES_LIMIT` files: what catches a file
  rewritten in place under its own name, which leaves its folder's time alone. Above that
  (``auto``, ``folders``), such a file is noticed when a run reads it (the loader compares each
  file's size and modification time with the index: :mod:`clusterbench.data.folder`) or
  stages it.

NumPy and the standard library only: the Snakefile's checks import it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.data import content
from clusterbench.data import index as images_index
from clusterbench.formats._layout import is_junk


@dataclass
class Changes:
    """What changed, each a list of names (relative to the folder read in place)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: Sources that changed as a whole (an archive), or cannot be read.
    sources: list[str] = field(default_factory=list)
    #: Images whose bytes changed, their size and modification time the same (``content``).
    content: list[str] = field(default_factory=list)
    #: ``check: content`` asked, and the index keeps no sha256 of its images (made before).
    undigested: bool = False
    #: What was compared: ``files``, ``folders`` or ``content``.
    compared: str = "folders"

    def __bool__(self) -> bool:
        return (
            bool(self.added or self.removed or self.changed or self.sources or self.content)
            or self.undigested
        )

    def text(self, shown: int = 3) -> str:
        parts = list(self.sources)
        for what, names in (
            ("added", self.added),
            ("removed", self.removed),
            ("changed in size or modification time", self.changed),
            ("changed in content (sha256), of the same size and modification time", self.content),
        ):
            if names:
                more = f", and {len(names) - shown} more" if len(names) > shown else ""
                parts.append(f"{len(names):,} file(s) {what} ({', '.join(names[:shown])}{more})")
        return "; ".join(parts)


def compare(path: Path, check: str, limit: int) -> Changes:
    """The changes of the sources of the index ``path`` (module docstring); ``check``:
    ``files``, ``folders``, ``auto`` (files up to ``limit`` images) or ``content`` (files, and
    then, where they found nothing, every image's bytes: :mod:`clusterbench.data.content`)."""
    found = compare_stats(path, "files" if check == "content" else check, limit)
    if check == "content":
        found.compared = "content"
        if not found:
            index = images_index.read(path)
            if "sha256" not in index.columns:
                found.undigested = True
            else:
                found.content = content.changed(index)
    return found


def compare_stats(path: Path, check: str, limit: int) -> Changes:
    """:func:`compare` by sizes and modification times alone."""
    header, dirs = images_index.read_dirs(path)
    found = Changes()
    roots = header["roots"]
    for root in roots:
        if root["kind"] == "archive":
            try:
                st = os.stat(root["path"])
            except OSError as exc:
                found.sources.append(f"{root['path']} cannot be read ({exc.strerror or exc})")
                continue
            if (st.st_size, st.st_mtime_ns) != (root["size"], root["mtime"]):
                found.sources.append(f"{root['path']} changed (its size or modification time)")
    folders = [k for k, r in enumerate(roots) if r["kind"] == "folder"]
    if not folders:
        return found
    images = int(header.get("images", 0))
    found.compared = check if check != "auto" else ("files" if images <= limit else "folders")
    moved = changed_folders(roots, dirs)
    if not moved and found.compared == "folders":
        return found
    index = images_index.read(path)
    names = index.names()
    if found.compared == "files":
        compare_files(index, names, roots, found)
    known = {(int(k), n) for k, n in zip(dirs.get("root", ()), dirs.get("name", ()), strict=True)}
    compare_folders(index, names, roots, moved, known, header, found)
    return found


def changed_folders(roots: list[dict[str, Any]], dirs: dict[str, Any]) -> list[tuple[int, str]]:
    """The recorded folders whose modification time changed, or that are gone: ``(root,
    name)``."""
    moved = []
    for k, name, mtime in zip(
        dirs.get("root", ()), dirs.get("name", ()), dirs.get("mtime", ()), strict=True
    ):
        folder = os.path.join(roots[int(k)]["path"], name) if name else roots[int(k)]["path"]
        try:
            now = os.stat(folder).st_mtime_ns
        except OSError:
            now = None
        if now != int(mtime):
            moved.append((int(k), name))
    return moved


def compare_files(
    index: Any, names: list[str], roots: list[dict[str, Any]], found: Changes
) -> None:
    """Every file's size and modification time against the index."""
    cols = index.columns
    for row, name in enumerate(names):
        k = int(cols["root"][row])
        if roots[k]["kind"] != "folder":
            continue
        try:
            st = os.stat(f"{roots[k]['path']}/{name}")
        except OSError:
            found.removed.append(name)
            continue
        if st.st_size != cols["size"][row] or st.st_mtime_ns != cols["mtime"][row]:
            found.changed.append(name)


def compare_folders(
    index: Any,
    names: list[str],
    roots: list[dict[str, Any]],
    moved: list[tuple[int, str]],
    known: set[tuple[int, str]],
    header: dict[str, Any],
    found: Changes,
) -> None:
    """In each folder that changed: its files listed again against the index's (added,
    removed; with ``check: folders`` also changed in size or time)."""
    by_folder: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    for row, name in enumerate(names):
        folder, _, base = name.rpartition("/")
        by_folder[(int(index.columns["root"][row]), folder)][base] = row
    seen_removed = set(found.removed)
    for k, folder in moved:
        base = roots[k]["path"]
        here = os.path.join(base, folder) if folder else base
        recorded = by_folder.get((k, folder), {})
        try:
            entries = list(os.scandir(here))
        except OSError:
            entries = []
        on_disk = set()
        for entry in entries:
            rel = f"{folder}/{entry.name}" if folder else entry.name
            if is_junk((entry.name,)):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                # a new folder: its files are new (a link to a folder is not walked again:
                # the folder is listed under its own name, scan.walk)
                if (k, rel) not in known and not entry.is_symlink():
                    found.added += [f"{rel}/{n}" for n in new_files(entry.path)]
                continue
            if len(rel.split("/")) < int(roots[k].get("depth", 1)):
                continue  # beside the class folders: no sample
            on_disk.add(entry.name)
            row = recorded.get(entry.name)
            if row is None:
                found.added.append(rel)
            elif found.compared == "folders":
                st = entry.stat()
                cols = index.columns
                if st.st_size != cols["size"][row] or st.st_mtime_ns != cols["mtime"][row]:
                    found.changed.append(rel)
        for gone in sorted(set(recorded) - on_disk):
            rel = f"{folder}/{gone}" if folder else gone
            if rel not in seen_removed:
                found.removed.append(rel)


def new_files(folder: str) -> list[str]:
    """The files under a folder the index does not know (relative to it), junk left out."""
    found = []
    for top, subdirs, files in os.walk(folder):
        subdirs[:] = [d for d in subdirs if not is_junk((d,))]
        rel = os.path.relpath(top, folder)
        found += [f if rel == "." else f"{rel}/{f}" for f in files if not is_junk((f,))]
    return sorted(found)
