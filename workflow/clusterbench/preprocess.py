"""Stage 2: decode a downloaded dataset once into uint8 ``.npy`` arrays plus ``meta.json``.

Images are stored ``(N, H, W, C)`` uint8 and labels ``(N,)`` int64 for the ``train``, ``val`` and
``test`` splits. ``val`` is a seeded random subset of the official training split; digits, which
has no official test split, also holds out a seeded ``test`` subset. ``meta.json`` (written last)
records the per-channel mean/std of the training split on the 0..1 scale and the class names.

Every dataset's files are decoded by its format, a plugin of :mod:`clusterbench.formats`: a
built-in dataset names its format (scikit-learn's ``digits.csv.gz``: ``digits-csv``; MNIST:
``idx``; CIFAR-10's binary tarball: ``cifar-binary``) and is checked against its spec (image
shape, classes, an official test split); a declared one gives its format in the config.

Text (``format: text``, :func:`preprocess_text`) is cut into windows of ``seq_len + 1`` byte
tokens: ``{split}_x.npy`` holds the inputs, ``{split}_y.npy`` the next-token targets, both uint8
``(N, seq_len)``. Synthetic data (``synthetic``, ``synthetic-text``, :func:`describe_synthetic`)
is generated where it trains: ``meta.json`` alone describes it (no array is written).
An image folder with ``storage: files`` (one a run streams, or one read in place:
:mod:`clusterbench.config.storage`) is not decoded: an ``index.npz`` says where each image's bytes
are (in place; a ``.tar.gz``'s extracted into ``files/``), its class and split
(:mod:`clusterbench.data.indexing`), for the loader to decode per batch.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench import formats
from clusterbench.config import (
    ConfigError,
    bad_settings,
    split_size_problems,
    split_sizes,
    stage_params,
)
from clusterbench.config.datasets import DatasetError, DatasetSpec, get_dataset
from clusterbench.core import integrity
from clusterbench.core.atomic import atomic_open, write_json
from clusterbench.core.interrupted import one_line
from clusterbench.core.params import read_json_object
from clusterbench.download import file_digests

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


class PreprocessError(ValueError):
    """Bad parameters, a bad manifest or a corrupt input file; the message names the problem."""


@dataclass(frozen=True)
class SplitParams:
    val_fraction: float
    #: ``None`` for datasets with an official test split (the value is not used there).
    test_fraction: float | None
    seed: int


@dataclass
class Decoded:
    """A decoded dataset; ``x_test``/``y_test`` are ``None`` without an official test split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    class_names: tuple[str, ...]


# --------------------------------------------------------------------------- inputs


def parse_params(text: str) -> dict[str, Any]:
    """``--params``, checked against the config schema's definition of this stage's slice:
    ``{"val_fraction", "test_fraction", "split_seed", "min_split_size"}`` and, for a dataset
    declared in the config, its ``format``, ``files`` (names, in the config's order) and
    ``image_size``."""
    return stage_params("preprocess", text)


def load_manifest(
    path: Path, dataset: str, file_names: tuple[str, ...]
) -> tuple[dict[str, Path], dict[str, str]]:
    """Check ``MANIFEST.json`` (of ``dataset``, listing ``file_names``) and the files next to
    it; return their paths and sha256s."""
    manifest = read_json_object(
        path, "manifest of the download stage", error=PreprocessError, missing=PreprocessError
    )
    if not isinstance(manifest.get("files"), dict):
        raise PreprocessError(f"manifest {path} has no 'files' object")
    if manifest.get("dataset") != dataset:
        raise PreprocessError(
            f"manifest {path} is for dataset {manifest.get('dataset')!r}, not {dataset!r}"
        )
    entries = manifest["files"]
    if missing := [name for name in file_names if name not in entries]:
        raise PreprocessError(f"manifest {path} lacks {missing}")
    paths: dict[str, Path] = {}
    sha256: dict[str, str] = {}
    for name in file_names:
        entry = entries[name]
        # where the download left it: the file:// source read in place, or the cache entry
        # (an older manifest: beside it)
        file_path = (
            Path(entry["path"])
            if isinstance(entry, dict) and entry.get("path")
            else path.parent / name
        )
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise PreprocessError(f"manifest {path}: entry for {name} has no sha256")
        again = (
            "Run the workflow again: it sets the manifest aside and downloads the files again "
            f"(or: {integrity.remake_command(path)})"
        )
        if not file_path.is_file():
            raise PreprocessError(f"{file_path} (listed in {path}) does not exist. {again}")
        actual = file_digests(file_path)["sha256"]
        if actual != entry["sha256"]:
            raise PreprocessError(
                f"{file_path} does not match {path}: sha256 {actual}, expected "
                f"{entry['sha256']}. {again}"
            )
        paths[name], sha256[name] = file_path, actual
    return paths, sha256


def manifest_source(manifest: Path) -> dict[str, Any]:
    """Where the download left a dataset's files, as ``meta.json`` records it for the report
    (``source``): ``kind`` (``download``: in the cache; ``in place``: a ``file://`` source or a
    folder), ``where`` (the first file's path, or the folder), its files and their bytes, and
    ``cached``: the bytes the download cache holds of it (a copy the workflow made)."""
    try:
        content = json.loads(Path(manifest).read_text(encoding="utf-8"))
        entries = content.get("files") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    if content.get("path"):
        return {"kind": "in place", "where": content["path"], "files": 0, "bytes": 0, "cached": 0}
    sizes = {n: int(e.get("size") or 0) for n, e in entries.items() if isinstance(e, dict)}
    cached = sum(sizes[n] for n, e in entries.items() if e.get("stored") == "cache")
    first = next(iter(entries.values()), {})
    return {
        "kind": "download" if cached else "in place",
        "where": first.get("path") or first.get("url"),
        "url": first.get("url"),
        "files": len(entries),
        "bytes": sum(sizes.values()),
        "cached": cached,
    }


def added_bytes(files: dict[str, dict[str, Any]], source: dict[str, Any]) -> dict[str, int]:
    """``meta.json``'s ``added``: the bytes this dataset's steps wrote on the shared file
    system (the arrays, the download cache's copy)."""
    return {
        "arrays": int(sum(int(r["size"]) for r in files.values())),
        "cache": int(source.get("cached", 0)),
    }


# --------------------------------------------------------------------------- decoding


def check_builtin(decoded: Decoded, spec: DatasetSpec) -> None:
    """A built-in dataset's decoded files are what its spec says: image shape and classes."""
    for split, x in (("training", decoded.x_train), ("test", decoded.x_test)):
        if x is None or spec.image_shape is None:
            continue
        (*hw, c), (*want_hw, want_c) = x.shape[1:], spec.image_shape
        if (tuple(hw), c) != (tuple(want_hw), want_c):
            raise PreprocessError(
                f"dataset {spec.name!r}: {split} images are {tuple(hw)}, expected "
                f"{tuple(want_hw)}"
                + (f"; {c} channel(s), expected {want_c}" if c != want_c else "")
            )
    if spec.class_names and tuple(decoded.class_names) != tuple(spec.class_names):
        raise PreprocessError(
            f"dataset {spec.name!r}: the files give classes {list(decoded.class_names)}, "
            f"expected {list(spec.class_names)}"
        )
    if spec.official_test_split and decoded.x_test is None:
        raise PreprocessError(f"dataset {spec.name!r}: the files hold no official test split")


# --------------------------------------------------------------------------- split and stats


def split_indices(n: int, fractions: list[float], seed: int) -> list[np.ndarray]:
    """Seeded disjoint subsets of ``range(n)``: one per fraction, then the rest (all sorted):
    :func:`clusterbench.data.order.split_indices`, a :class:`PreprocessError` where a split
    would be empty."""
    from clusterbench.data.order import split_indices as seeded

    try:
        return seeded(n, fractions, seed)
    except ValueError as exc:
        raise PreprocessError(str(exc)) from None


def check_split_sizes(dataset: str, decoded: Decoded, params: dict[str, Any]) -> None:
    """:class:`ConfigError` naming the key (``datasets.<dataset>.val_fraction``, ...) if a split
    would hold fewer than ``min_split_size`` samples: checked before any array is written. The
    workflow checks a built-in dataset before any job; a declared one's size is known only now."""
    test_samples = None if decoded.y_test is None else len(decoded.y_test)
    problems = split_size_problems(dataset, params, len(decoded.y_train), test_samples)
    if problems:
        raise ConfigError("; ".join(problems))


def make_splits(decoded: Decoded, params: SplitParams) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    x, y = decoded.x_train, decoded.y_train
    if decoded.x_test is None:
        assert params.test_fraction is not None
        test, val, train = split_indices(
            len(y), [params.test_fraction, params.val_fraction], params.seed
        )
        return {"train": (x[train], y[train]), "val": (x[val], y[val]), "test": (x[test], y[test])}
    val, train = split_indices(len(y), [params.val_fraction], params.seed)
    return {
        "train": (x[train], y[train]),
        "val": (x[val], y[val]),
        "test": (decoded.x_test, decoded.y_test),
    }


def channel_stats(x: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel mean and (population) std of uint8 images ``(N, H, W, C)`` on the 0..1 scale.

    Computed from a 256-bin histogram per channel: exact, and without a float copy of the data.
    """
    values = np.arange(256, dtype=np.float64) / 255
    means, stds = [], []
    for ch in range(x.shape[-1]):
        counts = np.bincount(x[..., ch].ravel(), minlength=256).astype(np.float64)
        mean = counts @ values / counts.sum()
        var = counts @ (values - mean) ** 2 / counts.sum()
        means.append(float(mean))
        stds.append(float(np.sqrt(var)))
    return means, stds


# --------------------------------------------------------------------------- stage


def decode(dataset: str, manifest: Path, params: dict[str, Any]) -> tuple[Decoded, dict]:
    """The dataset's images, labels and class names, and the sha256 of each source file: its
    files decoded by its format (:mod:`clusterbench.formats`), a declared dataset's as the
    config says, a built-in one's as its spec says (and checked against the spec)."""
    spec = None if "format" in params else get_dataset(dataset)
    fmt = params["format"] if spec is None else spec.format
    names = tuple(params["files"]) if spec is None else spec.file_names
    files, sha256 = load_manifest(manifest, dataset, names)
    try:
        images = formats.decode(
            fmt,
            [files[n] for n in names],
            params.get("image_size"),
            None if spec is None else spec.class_names,
        )
    except formats.FormatError as exc:
        raise PreprocessError(f"dataset {dataset!r} ({fmt}): {exc}") from None
    decoded = Decoded(**vars(images))
    if spec is not None:
        check_builtin(decoded, spec)
    return decoded, sha256


def preprocess_files(
    dataset: str, manifest: Path, params: dict[str, Any], out_dir: Path, digests: bool = False
) -> dict[str, Any]:
    """``storage: files`` (an image folder a run streams, or one read in place): its images
    listed where they are (a ``.tar.gz``'s extracted), split as the arrays would be, and
    ``index.npz`` (with each image's sha256: ``digests``) and then ``meta.json`` written
    (:mod:`clusterbench.data.indexing`); return meta."""
    from clusterbench.data import indexing

    content = read_json_object(
        manifest, "manifest of the download stage", error=PreprocessError, missing=PreprocessError
    )
    names = () if content.get("path") else tuple(params["files"])
    files, sha256 = load_manifest(manifest, dataset, names)
    fmt = params["format"]
    try:
        listing, source = indexing.listing_of(dataset, content, files, fmt, out_dir)
        return indexing.finish(out_dir, dataset, listing, params, source, sha256, digests)
    except formats.FormatError as exc:
        raise PreprocessError(f"dataset {dataset!r} ({fmt}): {exc}") from None


def preprocess(
    dataset: str, manifest: Path, params_json: str, out_dir: Path, check: str = "auto"
) -> dict[str, Any]:
    """Validate inputs, decode, split, write the arrays and then ``meta.json``; return meta.
    An image folder stored as files is indexed instead (:func:`preprocess_files`; ``check``:
    the dataset's, ``content`` records each image's sha256)."""
    params = parse_params(params_json)
    out_dir = Path(out_dir)
    (out_dir / "meta.json").unlink(missing_ok=True)  # stale marker must not outlive new arrays
    (out_dir / "index.npz").unlink(missing_ok=True)  # nor an index the new one replaces
    if params.get("storage") == "files":
        return preprocess_files(dataset, Path(manifest), params, out_dir, check == "content")
    fmt = params.get("format")
    if fmt is not None and formats.is_synthetic(fmt):
        return describe_synthetic(dataset, Path(manifest), params, out_dir)
    if fmt is not None and formats.task_of(fmt) == "language-model":
        return preprocess_text(dataset, Path(manifest), params, out_dir)
    return preprocess_images(dataset, Path(manifest), params, out_dir)


def preprocess_images(
    dataset: str, manifest: Path, params: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """Decode, split, write the image and label arrays and then ``meta.json``; return meta."""
    decoded, sha256 = decode(dataset, manifest, params)

    official_test = decoded.x_test is not None
    check_split_sizes(dataset, decoded, params)
    split = SplitParams(
        val_fraction=params["val_fraction"],
        test_fraction=None if official_test else params["test_fraction"],
        seed=params["split_seed"],
    )
    splits = make_splits(decoded, split)
    mean, std = channel_stats(splits["train"][0])
    meta = {
        # what each array must still be when a later step reads it (clusterbench.core.integrity)
        "files": write_arrays(out_dir, splits),
        "dataset": dataset,
        "image_shape": list(decoded.x_train.shape[1:]),
        "num_classes": len(decoded.class_names),
        "class_names": list(decoded.class_names),
        "mean": mean,
        "std": std,
        "counts": {name: int(len(y)) for name, (_, y) in splits.items()},
        "seed": split.seed,
        "val_fraction": split.val_fraction,
        "test_fraction": split.test_fraction,
        "source_sha256": sha256,
    }
    meta["source"] = manifest_source(manifest)
    meta["added"] = added_bytes(meta["files"], meta["source"])
    write_json(out_dir / "meta.json", meta)
    return meta


def write_arrays(
    out_dir: Path, splits: dict[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, dict[str, Any]]:
    """``{split}_x.npy`` and ``{split}_y.npy`` of each split; returns their records (size,
    sha256, and a large file's blocks: :func:`clusterbench.core.integrity.record_with_blocks`) for
    ``meta.json``'s ``files``."""
    for name, (x, y) in splits.items():
        for suffix, array in (("x", x), ("y", y)):
            with atomic_open(out_dir / f"{name}_{suffix}.npy", "wb") as fh:
                np.save(fh, array, allow_pickle=False)
    return {
        f"{name}_{suffix}.npy": integrity.record_with_blocks(out_dir / f"{name}_{suffix}.npy")
        for name in splits
        for suffix in "xy"
    }


def preprocess_text(
    dataset: str, manifest: Path, params: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """A text dataset's files as byte tokens, cut into windows of ``seq_len + 1`` (inputs and
    next-token targets), split by the fractions; the arrays, then ``meta.json``."""
    from clusterbench.formats import text

    names = tuple(params["files"])
    files, sha256 = load_manifest(manifest, dataset, names)
    seq_len = params["seq_len"]
    try:
        stream = text.tokens([files[n] for n in names])
        x, y = text.windows(stream, seq_len)
    except formats.FormatError as exc:
        raise PreprocessError(f"dataset {dataset!r} ({params['format']}): {exc}") from None
    problems = split_size_problems(dataset, params, len(x), None)
    if problems:
        raise ConfigError("; ".join(problems) + f" (windows of seq_len {seq_len} + 1 bytes)")
    test, val, train = split_indices(
        len(x), [params["test_fraction"], params["val_fraction"]], params["split_seed"]
    )
    splits = {
        part: (x[idx], y[idx]) for part, idx in (("train", train), ("val", val), ("test", test))
    }
    meta = {
        "files": write_arrays(out_dir, splits),
        "dataset": dataset,
        "format": params["format"],
        "task": "language-model",
        "seq_len": seq_len,
        "vocabulary": text.VOCABULARY,
        "tokens": int(len(stream)),
        "counts": {name: int(len(inputs)) for name, (inputs, _) in splits.items()},
        "seed": params["split_seed"],
        "val_fraction": params["val_fraction"],
        "test_fraction": params["test_fraction"],
        "source_sha256": sha256,
    }
    meta["source"] = manifest_source(manifest)
    meta["added"] = added_bytes(meta["files"], meta["source"])
    write_json(out_dir / "meta.json", meta)
    return meta


def describe_synthetic(
    dataset: str, manifest: Path, params: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """``meta.json`` alone: what the training device generates (:mod:`clusterbench.data.
    synthetic`), from ``split_seed``; its manifest lists no file."""
    from clusterbench.formats import text

    load_manifest(manifest, dataset, ())
    fmt = params["format"]
    task = formats.task_of(fmt)
    counts = split_sizes(params["samples"], None, params["val_fraction"], params["test_fraction"])
    meta: dict[str, Any] = {"files": {}, "dataset": dataset, "format": fmt, "task": task}
    if task == "language-model":
        meta.update(seq_len=params.get("seq_len"), vocabulary=text.VOCABULARY)
    else:
        classes = params["classes"]
        meta.update(
            shape=params.get("shape"),
            num_classes=classes,
            class_names=[str(k) for k in range(classes)],
        )
    meta.update(
        synthetic=True,
        samples=params["samples"],
        counts=counts,
        seed=params["split_seed"],
        val_fraction=params["val_fraction"],
        test_fraction=params["test_fraction"],
    )
    write_json(out_dir / "meta.json", meta)
    return meta


@one_line("preprocess")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preprocess", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="dataset name: digits, mnist, cifar10")
    parser.add_argument("--manifest", required=True, type=Path, help="the download's MANIFEST.json")
    parser.add_argument("--params", required=True, help="the rule's config slice as JSON")
    parser.add_argument("--out-dir", required=True, type=Path, help="directory for .npy + meta")
    parser.add_argument(
        "--check",
        default="auto",
        choices=("auto", "files", "folders", "content"),
        help="the dataset's check: content records each image's sha256 in the index",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        meta = preprocess(args.dataset, args.manifest, args.params, args.out_dir, args.check)
    except (ConfigError, DatasetError) as exc:
        return bad_settings("preprocess", ConfigError(str(exc)))
    except PreprocessError as exc:
        print(f"preprocess: error: {exc}", file=sys.stderr)
        return 1
    log.info("%s: %s -> %s", args.dataset, meta["counts"], args.out_dir)
    return 0
