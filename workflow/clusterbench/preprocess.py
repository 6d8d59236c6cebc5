"""Stage 2: decode a downloaded dataset once into uint8 ``.npy`` arrays plus ``meta.json``.

Images are stored ``(N, H, W, C)`` uint8 and labels ``(N,)`` int64 for the ``train``, ``val`` and
``test`` splits. ``val`` is a seeded random subset of the official training split; digits, which
has no official test split, also holds out a seeded ``test`` subset. ``meta.json`` (written last)
records the per-channel mean/std of the training split on the 0..1 scale and the class names.

Decoders: scikit-learn's ``digits.csv.gz`` (64 pixel columns 0..16 + label, scaled to 0..255),
MNIST IDX files (magic numbers and dimensions validated) and the CIFAR-10 *binary* tarball
(records of one label byte + 3072 bytes CHW, converted to HWC).
"""

from __future__ import annotations

import argparse
import gzip
import io
import logging
import math
import struct
import sys
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench import formats, integrity
from clusterbench.atomic import atomic_open, write_json
from clusterbench.config import ConfigError, bad_settings, split_size_problems, stage_params
from clusterbench.datasets import DatasetError, DatasetSpec, get_dataset
from clusterbench.download import file_digests
from clusterbench.params import read_json_object

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
        entry, file_path = entries[name], path.parent / name
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


# --------------------------------------------------------------------------- decoders


def _gunzip(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise PreprocessError(f"{path.name}: corrupt or truncated gzip data ({exc})") from exc


def _check_labels(labels: np.ndarray, num_classes: int, where: str) -> np.ndarray:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise PreprocessError(
            f"{where}: labels must lie in 0..{num_classes - 1}, "
            f"found {labels.min()}..{labels.max()}"
        )
    return labels.astype(np.int64)


def decode_digits(files: dict[str, Path], spec: DatasetSpec) -> Decoded:
    """scikit-learn's ``digits.csv.gz``: rows of 64 pixel values 0..16 then the label."""
    path = files["digits.csv.gz"]
    h, w, c = spec.image_shape
    text = _gunzip(path).decode("ascii", errors="replace")
    try:
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as exc:
        raise PreprocessError(f"{path.name}: not a table of integers ({exc})") from exc
    if table.shape[0] == 0 or table.shape[1] != h * w * c + 1:
        raise PreprocessError(
            f"{path.name}: expected rows of {h * w * c} pixels + 1 label, got shape {table.shape}"
        )
    pixels = table[:, :-1]
    if pixels.min() < 0 or pixels.max() > 16:
        raise PreprocessError(f"{path.name}: pixel values must lie in 0..16")
    scaled = np.rint(pixels * (255 / 16)).astype(np.uint8).reshape(-1, h, w, c)
    labels = _check_labels(table[:, -1], spec.num_classes, path.name)
    return Decoded(scaled, labels, None, None, spec.class_names)


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """An unsigned-byte IDX array (magic ``0x000008<ndim>``) from a gzipped file."""
    data = _gunzip(path)
    header = 4 + 4 * ndim
    if len(data) < header:
        raise PreprocessError(f"{path.name}: {len(data)} bytes is too short for an IDX header")
    if data[:2] != b"\0\0" or data[2] != 0x08 or data[3] != ndim:
        raise PreprocessError(
            f"{path.name}: bad IDX magic number 0x{data[:4].hex()}, expected "
            f"0x000008{ndim:02x} (unsigned bytes, {ndim} dimension(s))"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = math.prod(dims)
    if len(data) - header != expected:
        raise PreprocessError(
            f"{path.name}: header dimensions {dims} need {expected} data bytes, the file has "
            f"{len(data) - header} (truncated or corrupt)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _mnist_split(files: dict[str, Path], prefix: str, spec: DatasetSpec):
    images_path = files[f"{prefix}-images-idx3-ubyte.gz"]
    labels_path = files[f"{prefix}-labels-idx1-ubyte.gz"]
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    h, w, c = spec.image_shape
    if images.shape[1:] != (h, w):
        raise PreprocessError(
            f"{images_path.name}: images are {images.shape[1:]}, expected {(h, w)}"
        )
    if images.shape[0] != labels.shape[0]:
        raise PreprocessError(
            f"{images_path.name} has {images.shape[0]} images but {labels_path.name} has "
            f"{labels.shape[0]} labels"
        )
    return images.reshape(-1, h, w, c), _check_labels(labels, spec.num_classes, labels_path.name)


def decode_mnist(files: dict[str, Path], spec: DatasetSpec) -> Decoded:
    """The four MNIST IDX files (train/t10k images idx3 and labels idx1)."""
    x_train, y_train = _mnist_split(files, "train", spec)
    x_test, y_test = _mnist_split(files, "t10k", spec)
    return Decoded(x_train, y_train, x_test, y_test, spec.class_names)


CIFAR_DIR = "cifar-10-batches-bin"
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_BATCH = "test_batch.bin"
CIFAR_META = "batches.meta.txt"


def _cifar_records(data: bytes, name: str, spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray]:
    h, w, c = spec.image_shape
    record = 1 + h * w * c
    if not data or len(data) % record:
        raise PreprocessError(
            f"{CIFAR_DIR}/{name}: {len(data)} bytes is not a whole number of {record}-byte "
            "records (truncated or corrupt)"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, record)
    images = np.ascontiguousarray(rows[:, 1:].reshape(-1, c, h, w).transpose(0, 2, 3, 1))
    return images, _check_labels(rows[:, 0], spec.num_classes, f"{CIFAR_DIR}/{name}")


def decode_cifar10(files: dict[str, Path], spec: DatasetSpec) -> Decoded:
    """The CIFAR-10 binary tarball, read in one streaming pass without extracting to disk."""
    path = files["cifar-10-binary.tar.gz"]
    wanted = {f"{CIFAR_DIR}/{n}" for n in (*CIFAR_TRAIN_BATCHES, CIFAR_TEST_BATCH, CIFAR_META)}
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    members[member.name.removeprefix(CIFAR_DIR + "/")] = tar.extractfile(
                        member
                    ).read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise PreprocessError(f"{path.name}: corrupt or truncated archive ({exc})") from exc
    wanted_names = [n.removeprefix(CIFAR_DIR + "/") for n in sorted(wanted)]
    if missing := [n for n in wanted_names if n not in members]:
        raise PreprocessError(f"{path.name}: missing {[f'{CIFAR_DIR}/{n}' for n in missing]}")
    class_names = tuple(
        line.strip() for line in members[CIFAR_META].decode("utf-8").splitlines() if line.strip()
    )
    if len(class_names) != spec.num_classes:
        raise PreprocessError(
            f"{CIFAR_DIR}/{CIFAR_META}: {len(class_names)} class names, expected {spec.num_classes}"
        )
    train = [_cifar_records(members[n], n, spec) for n in CIFAR_TRAIN_BATCHES]
    x_test, y_test = _cifar_records(members[CIFAR_TEST_BATCH], CIFAR_TEST_BATCH, spec)
    return Decoded(
        np.concatenate([x for x, _ in train]),
        np.concatenate([y for _, y in train]),
        x_test,
        y_test,
        class_names,
    )


DECODERS: dict[str, Callable[[dict[str, Path], DatasetSpec], Decoded]] = {
    "digits": decode_digits,
    "mnist": decode_mnist,
    "cifar10": decode_cifar10,
}


# --------------------------------------------------------------------------- split and stats


def split_indices(n: int, fractions: list[float], seed: int) -> list[np.ndarray]:
    """Seeded disjoint subsets of ``range(n)``: one per fraction, then the rest (all sorted).

    Each subset holds ``round(fraction * n)`` (as ``clusterbench.config.split_sizes`` counts)."""
    order = np.random.default_rng(seed).permutation(n)
    sizes = [round(f * n) for f in fractions]
    bounds = np.cumsum([0, *sizes])
    parts = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    parts.append(order[bounds[-1] :])
    if any(len(p) == 0 for p in parts):
        raise PreprocessError(
            f"{n} examples are too few for fractions {fractions}: a split would be empty"
        )
    return [np.sort(p) for p in parts]


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
    """The dataset's images, labels and class names, and the sha256 of each source file."""
    if "format" in params:  # declared in the config: the format's decoder, classes from data
        names = tuple(params["files"])
        files, sha256 = load_manifest(manifest, dataset, names)
        try:
            images = formats.DECODERS[params["format"]](
                [files[n] for n in names], params.get("image_size")
            )
        except formats.FormatError as exc:
            raise PreprocessError(f"dataset {dataset!r} ({params['format']}): {exc}") from None
        return Decoded(**vars(images)), sha256
    spec = get_dataset(dataset)
    files, sha256 = load_manifest(manifest, dataset, spec.file_names)
    return DECODERS[dataset](files, spec), sha256


def preprocess(dataset: str, manifest: Path, params_json: str, out_dir: Path) -> dict[str, Any]:
    """Validate inputs, decode, split, write the arrays and then ``meta.json``; return meta."""
    params = parse_params(params_json)
    out_dir = Path(out_dir)
    (out_dir / "meta.json").unlink(missing_ok=True)  # stale marker must not outlive new arrays
    decoded, sha256 = decode(dataset, Path(manifest), params)

    official_test = decoded.x_test is not None
    check_split_sizes(dataset, decoded, params)
    split = SplitParams(
        val_fraction=params["val_fraction"],
        test_fraction=None if official_test else params["test_fraction"],
        seed=params["split_seed"],
    )
    splits = make_splits(decoded, split)
    mean, std = channel_stats(splits["train"][0])
    for name, (x, y) in splits.items():
        for suffix, array in (("x", x), ("y", y)):
            with atomic_open(out_dir / f"{name}_{suffix}.npy", "wb") as fh:
                np.save(fh, array, allow_pickle=False)
    meta = {
        # what each array must still be when a later step reads it (clusterbench.integrity)
        "files": {
            f"{name}_{suffix}.npy": integrity.record(out_dir / f"{name}_{suffix}.npy")
            for name in splits
            for suffix in "xy"
        },
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
    write_json(out_dir / "meta.json", meta)
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="preprocess", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="dataset name: digits, mnist, cifar10")
    parser.add_argument("--manifest", required=True, type=Path, help="the download's MANIFEST.json")
    parser.add_argument("--params", required=True, help="the rule's config slice as JSON")
    parser.add_argument("--out-dir", required=True, type=Path, help="directory for .npy + meta")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        meta = preprocess(args.dataset, args.manifest, args.params, args.out_dir)
    except (ConfigError, DatasetError) as exc:
        return bad_settings("preprocess", ConfigError(str(exc)))
    except PreprocessError as exc:
        print(f"preprocess: error: {exc}", file=sys.stderr)
        return 1
    log.info("%s: %s -> %s", args.dataset, meta["counts"], args.out_dir)
    return 0
