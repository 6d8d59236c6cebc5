"""The index of an image folder stored as files (``results/data/<name>/index.npz``): where each
image's bytes are, its class and split, and what tells that its source changed.

An image is read from one of the index's *roots*:

* ``folder``: a folder read in place (``datasets.<name>.path``); the image is the file
  ``<root>/<name>``; its size and modification time (ns) are recorded, and each folder's
  modification time (``dirs``: a file added, removed or renamed changes it);
* ``archive``: an archive read in place (a ``.zip``, a ``.tar``, ImageNet's tars); the image is
  ``length`` bytes at ``offset`` in it (zip ``method`` 8: deflated, inflated to ``size``
  bytes); the archive's size and modification time are in its root;
* ``copy``: the workflow's own copy, extracted from a ``.tar.gz`` (a gzip stream cannot be
  read at an offset) into ``files/`` of the data dir: image N at ``files/NNNN/NNNNNNN.<ext>``,
  with its sha256 (``sha256``, what staging checks a copy against).

Columns (NumPy arrays of one row per image): ``root``, ``name`` (what an error names: the
path under the folder, the archive member), ``size``, ``mtime``, ``offset``, ``length``,
``method``, ``label``, ``split`` (0 train, 1 val, 2 test), optionally ``sha256`` (N x 32
bytes); the names as one UTF-8 blob with offsets. ``header`` (JSON): ``roots``,
``class_names``, ``dataset``. Compressed: an index adds tens of bytes per image (1.28 M
images: about 20 MB), and loads in a fraction of a second.

NumPy and the standard library only: the workflow's checks (the Snakefile) read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SPLITS = ("train", "val", "test")
NAME = "index.npz"
#: The columns every index has (``sha256`` only where the workflow copied the images).
COLUMNS = ("root", "size", "mtime", "offset", "length", "method", "label", "split")
#: Images per folder of an extracted copy's ``files/``.
PER_FOLDER = 1000


class IndexError_(ValueError):
    """An index that is not what preprocessing writes; the message names the file."""


def pack_names(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as one UTF-8 blob and N + 1 offsets."""
    encoded = [n.encode("utf-8", "surrogateescape") for n in names]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def unpack_name(blob: np.ndarray, offsets: np.ndarray, i: int) -> str:
    return bytes(blob[offsets[i] : offsets[i + 1]]).decode("utf-8", "surrogateescape")


def unpack_names(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    text = blob.tobytes()
    return [
        text[a:b].decode("utf-8", "surrogateescape")
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]


def copy_path(row: int, name: str) -> str:
    """Where an extracted copy keeps image ``row`` (archive order), relative to the data dir;
    no part of the member's name but its extension (nothing lands outside ``files/``)."""
    ext = os.path.splitext(name)[1].lower()
    return f"files/{row // PER_FOLDER:04d}/{row:07d}{ext}"


@dataclass
class ImageIndex:
    """An index in memory (module docstring)."""

    header: dict[str, Any]
    columns: dict[str, np.ndarray]
    name_blob: np.ndarray
    name_offsets: np.ndarray
    #: Folder roots' folders: root, name (relative, '' for the root itself), mtime (ns).
    dirs: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns["label"])

    @property
    def roots(self) -> list[dict[str, Any]]:
        return list(self.header["roots"])

    @property
    def class_names(self) -> list[str]:
        return list(self.header["class_names"])

    def name(self, row: int) -> str:
        return unpack_name(self.name_blob, self.name_offsets, int(row))

    def names(self) -> list[str]:
        return unpack_names(self.name_blob, self.name_offsets)

    def rows(self, split: str) -> np.ndarray:
        """The rows of ``split``'s images, in index order (sample i is row rows[i])."""
        return np.flatnonzero(self.columns["split"] == SPLITS.index(split))

    def counts(self) -> dict[str, int]:
        found = np.bincount(self.columns["split"], minlength=len(SPLITS))
        return {split: int(n) for split, n in zip(SPLITS, found, strict=True)}

    def bytes(self) -> int:
        return int(self.columns["size"].sum())


def write(path: Path, index: ImageIndex) -> None:
    """``index`` as ``path`` (compressed ``.npz``), atomically."""
    from clusterbench.core.atomic import atomic_open

    arrays = {
        "header": np.frombuffer(json.dumps(index.header).encode(), dtype=np.uint8),
        "name_blob": index.name_blob,
        "name_offsets": index.name_offsets,
        **index.columns,
    }
    if index.dirs:
        blob, offsets = pack_names(index.dirs["name"])
        arrays.update(
            dir_root=np.asarray(index.dirs["root"], dtype=np.int32),
            dir_blob=blob,
            dir_offsets=offsets,
            dir_mtime=np.asarray(index.dirs["mtime"], dtype=np.int64),
        )
    with atomic_open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def read_header(path: Path) -> dict[str, Any]:
    """The index's header alone (its roots and classes)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return json.loads(npz["header"].tobytes())
    except (OSError, ValueError, KeyError) as exc:
        raise IndexError_(f"{path}: not the index preprocessing writes ({exc})") from None


def read_dirs(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the folder table of an index (what the cheap check compares)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            header = json.loads(npz["header"].tobytes())
            dirs = {}
            if "dir_blob" in npz.files:
                dirs = {
                    "root": npz["dir_root"],
                    "name": unpack_names(npz["dir_blob"], npz["dir_offsets"]),
                    "mtime": npz["dir_mtime"],
                }
    except (OSError, ValueError, KeyError) as exc:
        raise IndexError_(f"{path}: not the index preprocessing writes ({exc})") from None
    return header, dirs


def read(path: Path) -> ImageIndex:
    """The whole index at ``path``, its columns checked against each other."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            header = json.loads(npz["header"].tobytes())
            columns = {key: npz[key] for key in COLUMNS}
            if "sha256" in npz.files:
                columns["sha256"] = npz["sha256"]
            blob, offsets = npz["name_blob"], npz["name_offsets"]
    except (OSError, ValueError, KeyError) as exc:
        raise IndexError_(f"{path}: not the index preprocessing writes ({exc})") from None
    _, dirs = read_dirs(path)
    lengths = {key: len(value) for key, value in columns.items()}
    lengths["name"] = len(offsets) - 1
    if len(set(lengths.values())) != 1:
        raise IndexError_(f"{path}: its columns differ in length: {lengths}")
    return ImageIndex(header, columns, blob, offsets, dirs)


def build(
    header: Mapping[str, Any],
    names: Sequence[str],
    columns: Mapping[str, Sequence[Any]],
    dirs: Mapping[str, Sequence[Any]] | None = None,
) -> ImageIndex:
    """An index from per-image lists (``columns``: :data:`COLUMNS`, ``split`` as numbers)."""
    types = {
        "root": np.int16,
        "size": np.int64,
        "mtime": np.int64,
        "offset": np.int64,
        "length": np.int64,
        "method": np.uint8,
        "label": np.int32,
        "split": np.uint8,
    }
    arrays = {key: np.asarray(columns[key], dtype=types[key]) for key in COLUMNS}
    if "sha256" in columns:
        arrays["sha256"] = np.asarray(columns["sha256"], dtype=np.uint8).reshape(-1, 32)
    blob, offsets = pack_names(names)
    return ImageIndex(dict(header), arrays, blob, offsets, dict(dirs or {}))
