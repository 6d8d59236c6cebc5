"""Preprocessing of an image folder stored as files (``storage: files``): its archive extracted
into ``files/``, each image's record in ``index.json``, and ``meta.json``, written last.

* ``files/NNNN/NNNNNNN.<ext>``: image number N of the archive (in its order) under the folder
  of its thousand; the names hold no part of the archive's, whatever those are (``..``, an
  absolute path: nothing lands outside ``files/``). Extracted into a hidden folder first and
  renamed into place when complete.
* ``index.json``: per image (columns of equal length under ``files``): ``path`` (relative to
  the data dir), ``member`` (its name in the archive), ``size`` and ``sha256`` (what staging
  checks a copy against), ``label`` (index into ``class_names``) and ``split`` (train, val or
  test: the same seeded split as the dataset stored as arrays gets).
* ``meta.json``: ``storage: files``, ``index.json``'s size and sha256 (``files``: the workflow
  checks it before any job), the classes, the ``channels`` (1 when every image is greyscale,
  else 3), the dataset's ``image_size`` (null: none given), ``native_size`` (the images' own
  ``[H, W]`` when they all share it), the per-channel ``mean``/``std`` of up to
  :data:`STATS_SAMPLES` training images (seeded), the split ``counts`` and the total ``bytes``.

The images are not decoded here but for the statistics' sample: a file that cannot be decoded
is found by the loader, which names it (``on_bad_file``).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from clusterbench.core import integrity
from clusterbench.core.atomic import write_json
from clusterbench.formats import FormatError, check_classes
from clusterbench.formats.image_folder import class_of, iter_archive_images

#: Training images decoded (a seeded sample) for the per-channel mean and std.
STATS_SAMPLES = 256
#: PIL modes of a greyscale image.
GREY_MODES = ("1", "L", "I", "I;16", "F")
#: Images per folder of ``files/``.
PER_FOLDER = 1000


@dataclass
class Extracted:
    """What :func:`unpack` found: per image, in the archive's order."""

    members: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    sha256: list[str] = field(default_factory=list)
    #: PIL mode and (width, height) from the image's header; None: unreadable.
    modes: list[str | None] = field(default_factory=list)
    shapes: list[tuple[int, int] | None] = field(default_factory=list)
    labels: np.ndarray | None = None
    class_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.paths)


def relative_path(number: int, member: str) -> str:
    """Where image ``number`` (of the archive's order) is extracted, relative to the data dir."""
    ext = os.path.splitext(member)[1].lower()
    return f"files/{number // PER_FOLDER:04d}/{number:07d}{ext}"


def header(data: bytes) -> tuple[str | None, tuple[int, int] | None]:
    """An image's PIL mode and (width, height), from its header alone; (None, None) if none."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.mode, image.size
    except (UnidentifiedImageError, OSError, ValueError):
        return None, None


def unpack(archive: Path, out_dir: Path) -> Extracted:
    """Extract ``archive``'s images into ``out_dir/files`` (module docstring), atomically: a
    hidden folder first, renamed when every file is written."""
    partial = out_dir / ".files.partial"
    shutil.rmtree(partial, ignore_errors=True)
    found = Extracted()
    for number, (member, data) in enumerate(iter_archive_images(archive)):
        path = relative_path(number, member.name)
        target = partial / path.removeprefix("files/")
        if number % PER_FOLDER == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        mode, shape = header(data)
        found.members.append(str(member))
        found.paths.append(path)
        found.sizes.append(len(data))
        found.sha256.append(hashlib.sha256(data).hexdigest())
        found.modes.append(mode)
        found.shapes.append(shape)
    if not found.paths:
        shutil.rmtree(partial, ignore_errors=True)
        raise FormatError(f"{archive.name}: no PNG or JPEG images in the archive")
    classes = class_of([PurePosixPath(m) for m in found.members], archive.name)
    names = tuple(sorted(set(classes)))
    check_classes(names, archive.name)
    index = {name: i for i, name in enumerate(names)}
    found.labels = np.array([index[c] for c in classes], dtype=np.int64)
    found.class_names = names
    final = out_dir / "files"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    return found


def channel_stats(
    out_dir: Path, found: Extracted, rows: np.ndarray, grey: bool, seed: int
) -> tuple[list[float], list[float], int]:
    """Per-channel mean and std (0..1 scale) of up to :data:`STATS_SAMPLES` of ``rows``
    (training images, a seeded choice) decoded whole; unreadable ones are passed over."""
    from PIL import Image, UnidentifiedImageError

    chosen = np.random.default_rng([seed, 1]).permutation(rows)[:STATS_SAMPLES]
    channels = 1 if grey else 3
    counts = np.zeros((channels, 256), dtype=np.float64)
    used = 0
    for row in chosen:
        try:
            with Image.open(out_dir / found.paths[row]) as image:
                pixels = np.asarray(image.convert("L" if grey else "RGB"), dtype=np.uint8)
        except (UnidentifiedImageError, OSError, ValueError):
            continue
        pixels = pixels.reshape(-1, channels)
        for ch in range(channels):
            counts[ch] += np.bincount(pixels[:, ch], minlength=256)
        used += 1
    if used == 0:
        raise FormatError("none of the sampled training images can be decoded")
    values = np.arange(256, dtype=np.float64) / 255
    means = [float(c @ values / c.sum()) for c in counts]
    stds = [
        float(np.sqrt(c @ (values - m) ** 2 / c.sum())) for c, m in zip(counts, means, strict=True)
    ]
    return means, stds, used


def write_index(out_dir: Path, dataset: str, found: Extracted, split_of: Sequence[str]) -> Path:
    """``index.json`` (module docstring)."""
    path = out_dir / "index.json"
    write_json(
        path,
        {
            "dataset": dataset,
            "class_names": list(found.class_names),
            "files": {
                "path": found.paths,
                "member": found.members,
                "size": found.sizes,
                "sha256": found.sha256,
                "label": [int(v) for v in found.labels],
                "split": list(split_of),
            },
        },
    )
    return path


def finish(
    out_dir: Path,
    dataset: str,
    found: Extracted,
    splits: Mapping[str, np.ndarray],
    params: Mapping[str, Any],
    source_sha256: Mapping[str, str],
) -> dict[str, Any]:
    """Write ``index.json`` and then ``meta.json`` (module docstring) for the extracted images
    split into ``splits`` (name -> image numbers); return the meta."""
    split_of = np.empty(len(found), dtype=object)
    for name, rows in splits.items():
        split_of[rows] = name
    index = write_index(out_dir, dataset, found, list(split_of))
    readable = [m for m in found.modes if m is not None]
    grey = bool(readable) and all(m in GREY_MODES for m in readable)
    mean, std, used = channel_stats(out_dir, found, splits["train"], grey, params["split_seed"])
    shapes = {s for s in found.shapes if s is not None}
    meta = {
        "storage": "files",
        "files": {"index.json": integrity.record(index)},
        "dataset": dataset,
        "num_classes": len(found.class_names),
        "class_names": list(found.class_names),
        "channels": 1 if grey else 3,
        "image_size": list(params["image_size"]) if params.get("image_size") else None,
        "native_size": list(next(iter(shapes))[::-1]) if len(shapes) == 1 else None,
        "mean": mean,
        "std": std,
        "stats_samples": used,
        "counts": {name: int(len(rows)) for name, rows in splits.items()},
        "bytes": int(sum(found.sizes)),
        "seed": params["split_seed"],
        "val_fraction": params["val_fraction"],
        "test_fraction": params["test_fraction"],
        "source_sha256": dict(source_sha256),
    }
    write_json(out_dir / "meta.json", meta)
    return meta
