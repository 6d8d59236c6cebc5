"""Preprocessing of an image folder stored as files: its images listed where they are (a folder
read in place, a ``.zip``'s or ``.tar``'s members at their offsets, ImageNet's tars; a
``.tar.gz`` extracted first), split, and written as ``index.npz``
(:mod:`clusterbench.data.index`) and then ``meta.json``. Nothing else is written: no image is
copied (but a ``.tar.gz``'s), none decoded but a sample.

* **Splits:** the seeded split of the training images into train, val (and test, without an
  official one), as the arrays get; folders ``train/``, ``val/``, ``test/`` (and ImageNet's
  validation set, the test split) give theirs. Every split is checked against
  ``min_split_size`` before anything is written (exit status 2, naming the key).
* **Checksums:** a file's sha256 is taken only where the workflow copies it (an extracted
  ``.tar.gz``; staging hashes what it copies), or with ``check: content`` (every image's, into
  the index: what the workflow compares its bytes with at every invocation). A folder read in
  place records each file's size and modification time (one ``lstat`` each, no file opened:
  1.28 M files are indexed in seconds), and each folder's modification time; an archive read in
  place is verified by its own sha256 (the download) and recorded by size and time. That is what
  the workflow compares at every invocation (:mod:`clusterbench.data.changes`) and the loader as
  it reads.
* **Statistics** from a seeded sample: the per-channel mean and std of up to
  :data:`STATS_SAMPLES` training images; the channels (1 when every image of a sample of up to
  :data:`HEADER_SAMPLES`, all of a smaller folder, is greyscale) and the images' common size
  (``native_size``) from their headers.
* ``meta.json`` also says where the data is read from (``source``: ``folder``, ``archive``
  in place or from the download cache, or ``copy``), its images and bytes, what was left out,
  and the bytes the workflow added (``added``: the index, an extracted copy, the download
  cache's copy).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.config import ConfigError, split_size_problems
from clusterbench.core import integrity
from clusterbench.core.atomic import write_json
from clusterbench.data import content
from clusterbench.data import index as images_index
from clusterbench.data.index import SPLITS
from clusterbench.data.scan import Listing, ScanError
from clusterbench.formats import FormatError, check_classes

log = logging.getLogger(__name__)

#: Training images decoded (a seeded sample) for the per-channel mean and std.
STATS_SAMPLES = 256
#: Images whose header is read (a seeded sample) for the channels and the common size.
HEADER_SAMPLES = 4096


def split_codes(listing: Listing, params: Mapping[str, Any], dataset: str) -> np.ndarray:
    """Each image's split (0 train, 1 val, 2 test): the listing's own where it gives one, the
    rest carved by the seeded split (:func:`clusterbench.data.order.split_indices`); a split
    below ``min_split_size`` raises :class:`ConfigError` naming the key."""
    from clusterbench.data.order import split_indices

    codes = np.asarray(listing.split, dtype=np.int64)
    given = set(codes[codes >= 0].tolist())
    seed, val, test = params["split_seed"], params["val_fraction"], params["test_fraction"]
    if not given:  # one folder per class: test and val held out of everything
        check_sizes(dataset, params, len(codes), None)
        held_test, held_val, _ = split_indices(len(codes), [test, val], seed)
        codes[:] = 0
        codes[held_test], codes[held_val] = 2, 1
        return codes
    train = np.flatnonzero(codes == 0)
    if 1 not in given:  # val carved from the training images
        check_sizes(dataset, params, len(train), int((codes == 2).sum()))
        held_val, _ = split_indices(len(train), [val], seed)
        codes[train[held_val]] = 1
        return codes
    minimum = params["min_split_size"]
    small = [
        f"datasets.{dataset}.min_split_size: the {split} split (its folder) holds {n} "
        f"sample(s), fewer than min_split_size = {minimum}"
        for split, n in zip(SPLITS, np.bincount(codes, minlength=3).tolist(), strict=True)
        if n < minimum
    ]
    if small:
        raise ConfigError("; ".join(small))
    return codes


def check_sizes(dataset: str, params: Mapping[str, Any], train: int, test: int | None) -> None:
    problems = split_size_problems(dataset, params, train, test)
    if problems:
        raise ConfigError("; ".join(problems))


def header_of(listing: Listing, dataset: str) -> dict[str, Any]:
    """The index's header: roots, classes, and what the change check needs."""
    depths: dict[int, int] = {}
    for k, name in zip(listing.root, listing.names, strict=True):
        depths[k] = min(depths.get(k, 1 << 30), len(name.split("/")))
    # a folder root's files above this depth lie beside the class folders: no samples
    roots = [{**r, "depth": depths.get(k, 1)} for k, r in enumerate(listing.roots)]
    return {
        "dataset": dataset,
        "roots": roots,
        "class_names": list(listing.classes),
        "images": len(listing),
    }


def make_index(listing: Listing, dataset: str, codes: np.ndarray) -> images_index.ImageIndex:
    columns: dict[str, Any] = {
        "root": listing.root,
        "size": listing.size,
        "mtime": listing.mtime,
        "offset": listing.offset,
        "length": listing.length,
        "method": listing.method,
        "label": listing.label,
        "split": codes,
    }
    if listing.sha256:
        columns["sha256"] = np.frombuffer(b"".join(listing.sha256), dtype=np.uint8)
    return images_index.build(header_of(listing, dataset), listing.names, columns, listing.dirs)


def sample_statistics(out_dir: Path, index: images_index.ImageIndex, seed: int) -> dict[str, Any]:
    """``channels``, ``native_size``, ``mean``, ``std`` and ``stats_samples`` from seeded samples
    (module docstring); unreadable images are passed over."""
    from clusterbench.data.folder import BadFile, Sources
    from clusterbench.formats._pixels import GREY_MODES, PixelError, header, open_checked, to_array

    sources = Sources(out_dir, index)
    rng = np.random.default_rng([seed, 2])
    modes, sizes = [], set()
    for row in rng.permutation(len(index))[:HEADER_SAMPLES].tolist():
        try:
            mode, size = header(sources.read(row))
        except (BadFile, PixelError):
            continue
        modes.append(mode)
        sizes.add(size)
    grey = bool(modes) and all(m in GREY_MODES for m in modes)
    channels = 1 if grey else 3
    chosen = np.random.default_rng([seed, 1]).permutation(index.rows("train"))[:STATS_SAMPLES]
    counts = np.zeros((channels, 256), dtype=np.float64)
    used = 0
    for row in chosen.tolist():
        try:
            pixels = to_array(open_checked(sources.read(row)), grey)
        except (BadFile, PixelError):
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
    native = list(next(iter(sizes))[::-1]) if len(sizes) == 1 else None
    return {
        "channels": channels,
        "native_size": native,
        "mean": means,
        "std": stds,
        "stats_samples": used,
    }


def finish(
    out_dir: Path,
    dataset: str,
    listing: Listing,
    params: Mapping[str, Any],
    source: dict[str, Any],
    source_sha256: Mapping[str, str],
    digests: bool = False,
) -> dict[str, Any]:
    """Split, then write ``index.npz`` and ``meta.json`` (module docstring); return the meta.
    ``source``: where the data is read from, as the manifest says; ``digests``: each image's
    sha256 into the index (``check: content``, :mod:`clusterbench.data.content`)."""
    check_classes(listing.classes, source.get("where", dataset))
    if listing.left_out:
        log.info("%s: %s", source.get("where", dataset), listing.left_out_text())
    codes = split_codes(listing, params, dataset)
    index = make_index(listing, dataset, codes)
    if digests:
        try:
            index.columns["sha256"] = content.digests(index)
        except content.ContentError as exc:
            raise ScanError(str(exc)) from None
    stats = sample_statistics(out_dir, index, params["split_seed"])
    path = out_dir / images_index.NAME
    images_index.write(path, index)
    record = integrity.record(path)
    copies = index.bytes() if any(r["kind"] == "copy" for r in listing.roots) else 0
    meta = {
        "storage": "files",
        "files": {images_index.NAME: record},
        "dataset": dataset,
        "num_classes": len(listing.classes),
        "class_names": list(listing.classes),
        **{k: stats[k] for k in ("channels", "native_size", "mean", "std", "stats_samples")},
        "image_size": list(params["image_size"]) if params.get("image_size") else None,
        "counts": index.counts(),
        "bytes": index.bytes(),
        "seed": params["split_seed"],
        "val_fraction": params["val_fraction"],
        "test_fraction": params["test_fraction"],
        "source_sha256": dict(source_sha256),
        "source": {
            **source,
            "images": len(index),
            "bytes": index.bytes(),
            "left_out": listing.left_out,
        },
        "added": {"index": record["size"], "copies": copies, "cache": int(source.get("cached", 0))},
    }
    write_json(out_dir / "meta.json", meta)
    return meta


def folder_source(folder: Path, fmt: str) -> dict[str, Any]:
    return {"kind": "folder", "where": str(folder), "format": fmt}


def listing_of(
    dataset: str, manifest: Mapping[str, Any], files: Mapping[str, Path], fmt: str, out_dir: Path
) -> tuple[Listing, dict[str, Any]]:
    """The images of ``dataset`` (module docstring) and where they are read from; ``manifest``
    the download's, ``files`` its files' paths (verified)."""
    from clusterbench.data import scan

    if manifest.get("path"):
        folder = Path(manifest["path"])
        if not folder.is_dir():
            raise ScanError(f"{folder} (datasets.{dataset}.path) is not a directory")
        if fmt == "imagenet":
            from clusterbench.data import imagenet

            return imagenet.scan(folder), folder_source(folder, fmt)
        return scan.scan_folder(folder), folder_source(folder, fmt)
    ((name, path),) = files.items()
    entry = manifest["files"][name]
    stored = entry.get("stored", "in place")
    cached = int(entry.get("size", 0)) if stored == "cache" else 0
    source = {
        "kind": "archive",
        "where": str(path),
        "url": entry.get("url"),
        "stored": stored,
        "cached": cached,
        "format": fmt,
    }
    if name.endswith(".zip"):
        return scan.scan_zip(path), source
    if name.endswith(".tar"):
        return scan.scan_tar(path), source
    from clusterbench.data import extract

    return extract.unpack(path, out_dir), {**source, "kind": "copy"}


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
