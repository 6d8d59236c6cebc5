"""Node-local staging of an image folder stored as files (:mod:`clusterbench.data.staging` does
the rest: the lock, the space, the marker): its images copied from where its index reads them,
and checked.

* **What is copied:** each image of a folder read in place to ``roots/<k>/<its name>`` of the
  copy; each archive read in place whole, to ``roots/<k>/<archive name>`` (one sequential
  copy: its members are then read at the same offsets); an extracted copy's ``files/`` as they
  are. ``roots.json`` tells the loader where each root of the index now is
  (:func:`clusterbench.data.folder.resolved_roots`).
* **Checked as copied:** every byte read is hashed (sha256) as it is copied. An extracted
  copy's images are checked against the sha256 preprocessing recorded; an image read in place
  has no recorded sha256 (the index keeps sizes and modification times, see
  :mod:`clusterbench.data.indexing`): its source must still have the recorded size and
  modification time, and the sha256 of what was copied is kept (``digests.npy`` in the copy;
  an archive's in the marker), so that a later run verifies the copy against it.
* **In chunks:** the images are copied a chunk of :data:`CHUNK_ROWS` at a time by
  :func:`clusterbench.data.staging.threads` threads (hashing and file I/O release the GIL);
  nothing per image is held beyond arrays (1.28 M images stage in a few hundred MB).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.data import DataError
from clusterbench.data.index import ImageIndex, copy_path, unpack_name

#: Images per task of the copy's thread pool.
CHUNK_ROWS = 256
#: The sha256 of each image copied (rows of the index), in the copy.
DIGESTS = "digests.npy"
ROOTS = "roots.json"  # clusterbench.data.folder.STAGED_ROOTS


@dataclass
class ImagePlan:
    """What :func:`plan` found to copy: the index's rows, where each root is read and where it
    goes in the copy, the bytes."""

    index: ImageIndex
    sources: list[str]
    kinds: list[str]
    #: Each root's place in the copy, relative to it.
    places: list[str]
    need: int

    def rows(self) -> np.ndarray:
        """The rows copied one by one (an archive's members travel with their archive)."""
        kinds = np.asarray([k != "archive" for k in self.kinds], dtype=bool)
        return np.flatnonzero(kinds[self.index.columns["root"]])

    def source(self, row: int) -> str:
        k, name = self.root_name(row)
        if self.kinds[k] == "copy":
            return f"{self.sources[k]}/{copy_path(row, name)}"
        return f"{self.sources[k]}/{name}"

    def place(self, row: int) -> str:
        k, name = self.root_name(row)
        if self.kinds[k] == "copy":
            return copy_path(row, name)
        return f"{self.places[k]}/{name}"

    def root_name(self, row: int) -> tuple[int, str]:
        idx = self.index
        return int(idx.columns["root"][row]), unpack_name(idx.name_blob, idx.name_offsets, row)


def plan(data_dir: Path, index: ImageIndex) -> ImagePlan:
    """The images of ``index`` (of ``data_dir``) to copy (module docstring)."""
    from clusterbench.data.folder import resolved_roots

    sources = resolved_roots(data_dir, index)
    kinds = [r["kind"] for r in index.roots]
    places = [
        "."
        if kind == "copy"
        else f"roots/{k}"
        if kind == "folder"
        else f"roots/{k}/{Path(src).name}"
        for k, (kind, src) in enumerate(zip(kinds, sources, strict=True))
    ]
    rows = np.asarray([kinds[k] != "archive" for k in range(len(kinds))], dtype=bool)
    per_row = index.columns["size"][rows[index.columns["root"]]] if len(kinds) else []
    archives = sum(int(r["size"]) for r in index.roots if r["kind"] == "archive")
    return ImagePlan(index, sources, kinds, places, int(np.sum(per_row)) + archives)


def folders(p: ImagePlan) -> list[str]:
    """Every folder of the copy the images go into (made before the copy)."""
    found = {os.path.dirname(p.place(int(row))) for row in p.rows()}
    found |= {os.path.dirname(place) for k, place in enumerate(p.places) if p.kinds[k] == "archive"}
    return sorted(f for f in found if f)


def copy_rows(p: ImagePlan, rows: np.ndarray, target: Path) -> list[bytes]:
    """Copy images ``rows`` into ``target``, each hashed as read; their sha256s. A source that
    changed since it was indexed, or differs from its recorded sha256, is an error naming it.
    (Per file: an open, a stat, a read, a hash, a write: strings, not paths, in the loop.)"""
    cols = p.index.columns
    expected = cols.get("sha256")
    blob, offsets = p.index.name_blob, p.index.name_offsets
    base = str(target)
    digests = []
    for row in rows.tolist():
        k = int(cols["root"][row])
        name = bytes(blob[offsets[row] : offsets[row + 1]]).decode("utf-8", "surrogateescape")
        if p.kinds[k] == "copy":
            name = copy_path(row, name)
            src, dst = f"{p.sources[k]}/{name}", f"{base}/{name}"
        else:
            src, dst = f"{p.sources[k]}/{name}", f"{base}/{p.places[k]}/{name}"
        size, folder = int(cols["size"][row]), p.kinds[k] == "folder"
        data = read_checked(src, size, int(cols["mtime"][row]) if folder else None)
        digest = hashlib.sha256(data).digest()
        if expected is not None and digest != expected[row].tobytes():
            raise DataError(f"{src} differs from what preprocessing recorded: not staged")
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        digests.append(digest)
    return digests


def read_checked(src: str, size: int, mtime: int | None) -> bytes:
    """The bytes of ``src``, which must still have ``size`` bytes (and modification time
    ``mtime``, ns, where given): else an error naming it."""
    try:
        fd = os.open(src, os.O_RDONLY)
    except OSError as exc:
        raise DataError(f"{src} cannot be read ({exc.strerror or exc}): not staged") from None
    try:
        st = os.fstat(fd)
        if st.st_size != size or (mtime is not None and st.st_mtime_ns != mtime):
            raise DataError(
                f"{src} changed since it was indexed ({st.st_size:,} bytes, {size:,} recorded; "
                "or its modification time): not staged. Run the workflow again: it indexes the "
                "folder again"
            )
        data = os.read(fd, size + 1)
        while len(data) < size + 1:
            more = os.read(fd, size + 1 - len(data))
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    if len(data) != size:
        raise DataError(f"{src} differs from what preprocessing recorded: not staged")
    return data


def copy(p: ImagePlan, target: Path, threads: int, copy_hashing: Any) -> dict[str, Any]:
    """Copy every image and archive of ``p`` into ``target`` (module docstring), a large
    archive by ``copy_hashing`` (:func:`clusterbench.data.staging.copy_hashing`); what the
    marker keeps of it (the archives' sha256, by root)."""
    for folder in folders(p):
        (target / folder).mkdir(parents=True, exist_ok=True)
    rows = p.rows()
    chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
    digests = np.zeros((len(p.index), 32), dtype=np.uint8)
    archives: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        jobs = [
            pool.submit(archive_copy, p, k, target, copy_hashing)
            for k, kind in enumerate(p.kinds)
            if kind == "archive"
        ]
        for chunk, found in zip(
            chunks, pool.map(lambda c: copy_rows(p, c, target), chunks), strict=True
        ):
            if len(chunk):
                digests[chunk] = np.frombuffer(b"".join(found), dtype=np.uint8).reshape(-1, 32)
        for job in jobs:
            k, digest = job.result()
            archives[str(k)] = digest
    np.save(target / DIGESTS, digests, allow_pickle=False)
    return {"archives": archives}


def archive_copy(p: ImagePlan, k: int, target: Path, copy_hashing: Any) -> tuple[int, str]:
    """Copy archive root ``k`` whole, hashed; it must still be what was indexed."""
    src, record = p.sources[k], p.index.roots[k]
    st = os.stat(src)
    if (st.st_size, st.st_mtime_ns) != (record["size"], record["mtime"]):
        raise DataError(
            f"{src} changed since it was indexed (size or modification time): not staged"
        )
    digest = hashlib.sha256()
    size = copy_hashing(Path(src), target / p.places[k], digest)
    if size != record["size"]:
        raise DataError(f"{src} changed while it was copied: not staged")
    return k, digest.hexdigest()


def verify(p: ImagePlan, target: Path, kept: dict[str, Any], threads: int) -> list[str]:
    """Each image or archive of the copy at ``target`` that is missing or differs from what was
    copied (sizes first, then sha256)."""
    from clusterbench.core import integrity

    rows = p.rows()
    try:
        digests = np.load(target / DIGESTS, allow_pickle=False)
    except (OSError, ValueError):
        return [f"{target / DIGESTS} is missing or damaged"]
    if digests.shape != (len(p.index), 32):
        return [f"{target / DIGESTS} is not this copy's"]
    found = size_problems(p, target, rows)
    if found:
        return found
    for k, kind in enumerate(p.kinds):
        if kind == "archive" and integrity.sha256_of(target / p.places[k]) != kept.get(
            "archives", {}
        ).get(str(k)):
            found.append(f"{target / p.places[k]} differs from what was copied (sha256)")

    def check(chunk: np.ndarray) -> list[str]:
        bad = []
        for row in chunk.tolist():
            with open(target / p.place(row), "rb") as fh:
                if hashlib.sha256(fh.read()).digest() != digests[row].tobytes():
                    bad.append(f"{target / p.place(row)} differs from what was copied (sha256)")
        return bad

    chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for bad in pool.map(check, chunks):
            found += bad
    return found


def size_problems(p: ImagePlan, target: Path, rows: np.ndarray | None = None) -> list[str]:
    """Each image or archive of the copy that is missing or of another size."""
    cols = p.index.columns
    found = []
    for row in (p.rows() if rows is None else rows).tolist():
        place = target / p.place(row)
        try:
            size = place.stat().st_size
        except OSError:
            found.append(f"{place} is missing")
            continue
        if size != cols["size"][row]:
            found.append(f"{place} has {size:,} bytes, {int(cols['size'][row]):,} recorded")
        if len(found) > 10:
            break
    for k, kind in enumerate(p.kinds):
        place = target / p.places[k]
        if kind == "archive" and (
            not place.is_file() or place.stat().st_size != p.index.roots[k]["size"]
        ):
            found.append(f"{place} is missing or of another size")
    return found
