"""The content check of data read in place (``check: content``): every image's bytes hashed
where they are, against the sha256 the index recorded when it was made.

The other checks compare sizes and modification times (:mod:`clusterbench.data.changes`). They
cannot see a file rewritten in place with the same size and its modification time put back
(``touch -r``, ``cp -p``, ``rsync -t`` of another copy), two files of one size whose contents
were swapped that way, or a byte changed inside an archive read in place whose time was put
back. Reading every byte sees all of them, at a cost: all of the data is read at every
invocation of the workflow (measured in docs/data.md).

* :func:`digests`: each image's sha256, as the index keeps it (``sha256``: N x 32 bytes): a
  folder's file whole, an archive member's stored bytes (``length`` bytes at ``offset``, as
  stored: deflated for a deflated zip member). Rows of the workflow's own copy keep theirs.
* :func:`changed`: the names of the images whose bytes hash otherwise now, or cannot be read.

The standard library and NumPy only: the workflow's checks (the Snakefile) import it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from clusterbench.data.index import ImageIndex

#: Bytes read at a time from a file hashed whole.
CHUNK = 1 << 20


class ContentError(OSError):
    """An image whose bytes cannot be read while its digest is taken; the message names it."""


def digests(index: ImageIndex) -> np.ndarray:
    """Each image's sha256 (module docstring), ``(N, 32)`` uint8; a copy's row keeps the
    index's. A :class:`ContentError` naming an image that cannot be read."""
    found = np.zeros((len(index), 32), dtype=np.uint8)
    if "sha256" in index.columns:
        found[:] = index.columns["sha256"]
    for row, digest in hashed(index):
        if digest is None:
            raise ContentError(f"{describe(index, row)} cannot be read to take its sha256")
        found[row] = np.frombuffer(digest, dtype=np.uint8)
    return found


def changed(index: ImageIndex) -> list[str]:
    """The names of the images whose bytes hash otherwise than the index recorded, or cannot
    be read, in the index's order; the index must have ``sha256``."""
    recorded = index.columns["sha256"]
    rows = sorted(row for row, digest in hashed(index) if digest != recorded[row].tobytes())
    return [index.name(row) for row in rows]


def hashed(index: ImageIndex) -> Iterator[tuple[int, bytes | None]]:
    """``(row, sha256)`` of every image of a folder or archive read in place (None: it cannot
    be read), an archive's members in the order of their offsets (one read after the other)."""
    roots = index.roots
    root = index.columns["root"]
    for k, spec in enumerate(roots):
        rows = np.flatnonzero(root == k)
        if spec["kind"] == "folder":
            for row in rows.tolist():
                yield row, file_digest(f"{spec['path']}/{index.name(row)}")
        elif spec["kind"] == "archive":
            yield from member_digests(spec["path"], index, rows)


def file_digest(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").digest()
    except OSError:
        return None


def member_digests(path: str, index: ImageIndex, rows: np.ndarray) -> Iterator[tuple[int, Any]]:
    """The sha256 of the stored bytes of the archive ``path``'s members at ``rows``."""
    offset, length = index.columns["offset"], index.columns["length"]
    order = rows[np.argsort(offset[rows], kind="stable")].tolist()
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, after every member
    except OSError:
        yield from ((row, None) for row in order)
        return
    with fh:
        for row in order:
            try:
                fh.seek(int(offset[row]))
                data = fh.read(int(length[row]))
            except OSError:
                yield row, None
                continue
            yield row, hashlib.sha256(data).digest() if len(data) == length[row] else None


def describe(index: ImageIndex, row: int) -> str:
    spec = index.roots[int(index.columns["root"][row])]
    if spec["kind"] == "folder":
        return f"{spec['path']}/{index.name(row)}"
    return f"{spec['path']} (member {index.name(row)})"
