"""The preprocessed splits on disk: ``{split}_x.npy`` (uint8 ``(N, H, W, C)``),
``{split}_y.npy`` (int64 ``(N,)``) and ``meta.json`` (written last: shapes, classes, the
per-channel mean/std of the training split, and the arrays' checksums).

:func:`load_split` reads one split and checks it against ``meta.json`` (and the arrays
against their recorded checksums: a damaged one is named with the command that makes it
again, never used); :func:`load_training` the training and validation splits of a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.core import integrity
from clusterbench.core.params import read_json_object


@dataclass(frozen=True)
class SplitData:
    x: np.ndarray  # uint8 (N, H, W, C)
    y: np.ndarray  # int64 (N,)
    meta: dict[str, Any]


def load_split(data_dir: Path, split: str) -> SplitData:
    """Read ``meta.json`` and ``{split}_x.npy`` / ``{split}_y.npy``, checked against each other."""
    meta_path = data_dir / "meta.json"
    meta = read_json_object(meta_path, f"is {data_dir} a preprocessed data dir?")
    missing = [k for k in ("image_shape", "num_classes", "class_names") if k not in meta]
    if missing:
        raise ValueError(f"{meta_path}: missing field(s) {missing}")
    if len(meta["image_shape"]) != 3:
        raise ValueError(f"{meta_path}: image_shape must be [H, W, C], got {meta['image_shape']}")
    num_classes = meta["num_classes"]
    if len(meta["class_names"]) != num_classes:
        raise ValueError(
            f"{meta_path}: {len(meta['class_names'])} class_names for num_classes={num_classes}"
        )

    arrays = checked_arrays(data_dir, split, meta_path)
    x, y = arrays["x"], arrays["y"]
    shape = tuple(meta["image_shape"])
    if x.ndim != 4 or x.shape[1:] != shape:
        raise ValueError(
            f"{data_dir / f'{split}_x.npy'}: shape {x.shape}, expected (N, *{list(shape)}) "
            "from meta.json image_shape"
        )
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(
            f"{data_dir / f'{split}_y.npy'}: shape {y.shape}, expected ({len(x)},) to match "
            f"{split}_x.npy"
        )
    if len(y) == 0:
        raise ValueError(f"{data_dir / f'{split}_y.npy'}: split {split!r} is empty")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= num_classes:
        raise ValueError(
            f"{data_dir / f'{split}_y.npy'}: labels must be integers in [0, {num_classes}), "
            f"got dtype {y.dtype}, range [{y.min()}, {y.max()}]"
        )
    return SplitData(x=x, y=y.astype(np.int64), meta=meta)


@dataclass(frozen=True)
class TrainingSplits:
    """A run's training and validation splits (``meta`` is the data dir's ``meta.json``)."""

    train: SplitData
    val: SplitData

    @property
    def meta(self) -> dict[str, Any]:
        return self.train.meta


def checked_arrays(data_dir: Path, split: str, meta_path: Path) -> dict[str, np.ndarray]:
    """``{"x": ..., "y": ...}``: the split's arrays, once they are what preprocess wrote
    (meta.json's checksums: a damaged one is named with the command that makes it again,
    never used); a missing or unreadable one is an error naming it."""
    integrity.check(meta_path, "files", integrity.remake_command(meta_path), prefix=f"{split}_")
    arrays = {}
    for part in ("x", "y"):
        path = data_dir / f"{split}_{part}.npy"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (split {split!r} of {data_dir})")
        try:
            arrays[part] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ValueError(f"{path}: not a readable .npy array: {exc}") from None
    return arrays


def load_training(data_dir: Path, run: Mapping[str, Any]) -> TrainingSplits:
    """Load and check ``meta.json`` and the train/val arrays of a preprocessed data dir for
    ``run`` (its dataset, and enough samples for its workers)."""
    train, val = load_split(data_dir, "train"), load_split(data_dir, "val")
    meta, where = train.meta, data_dir / "meta.json"
    missing = [k for k in ("dataset", "mean", "std") if k not in meta]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    if meta["dataset"] != run["dataset"]:
        raise ValueError(
            f"{where}: dataset {meta['dataset']!r}, but run.dataset={run['dataset']!r}"
        )
    channels = meta["image_shape"][2]
    for key in ("mean", "std"):
        if len(meta[key]) != channels:
            raise ValueError(f"{where}: {key} has {len(meta[key])} values for {channels} channels")
    if any(s <= 0 for s in meta["std"]):
        raise ValueError(f"{where}: std {meta['std']} has a value <= 0")
    if len(train.y) < run["workers"]:
        raise ValueError(
            f"{data_dir}: {len(train.y)} training samples cannot feed workers={run['workers']}"
        )
    return TrainingSplits(train=train, val=val)


def check_mapped(data_dir: Path, meta: Mapping[str, Any], splits: tuple[str, ...]) -> None:
    """The arrays of ``splits`` as a streamed run reads them, memory-mapped: their headers
    (shape, dtype) against ``meta.json`` and their sizes against its records. Their sha256 is
    not read here (that would read every byte, on every rank): the workflow checks it before
    any job, and staging as it copies."""
    marker = data_dir / "meta.json"
    records = {
        name: {"size": record["size"]}
        for name, record in (meta.get("files") or {}).items()
        if name.startswith(splits)
    }
    found = integrity.problems(data_dir, records)
    if found:
        raise integrity.DamagedFile(
            "; ".join(found) + f" (checked against {marker}). Make it again with: "
            f"{integrity.remake_command(marker)}"
        )
    shape = tuple(meta["image_shape"])
    for split in splits:
        mapped = {}
        for part in ("x", "y"):
            path = data_dir / f"{split}_{part}.npy"
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (split {split!r} of {data_dir})")
            try:
                mapped[part] = np.load(path, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError) as exc:
                raise ValueError(f"{path}: not a readable .npy array: {exc}") from None
        x, y, path = mapped["x"], mapped["y"], data_dir / f"{split}_x.npy"
        if x.dtype != np.uint8 or x.shape[1:] != shape or len(x) != meta["counts"][split]:
            raise ValueError(
                f"{path}: {x.dtype} {x.shape}, expected uint8 ({meta['counts'][split]}, "
                f"*{list(shape)}) from meta.json"
            )
        if y.shape != (len(x),):
            labels = data_dir / f"{split}_y.npy"
            raise ValueError(f"{labels}: shape {y.shape}, expected ({len(x)},)")
