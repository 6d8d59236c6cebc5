"""Small, random, format-exact stand-ins for the real dataset files.

* MNIST: the four gzipped IDX files (magic 0x00000803 for images, 0x00000801 for labels).
* CIFAR-10: ``cifar-10-binary.tar.gz`` with ``cifar-10-batches-bin/data_batch_{1..5}.bin``,
  ``test_batch.bin`` (records of 1 label byte + 3072 bytes CHW) and ``batches.meta.txt``.
* digits: scikit-learn's ``digits.csv.gz`` layout (64 pixel columns 0..16, then the label).

Every generator writes the files into a directory and returns a :class:`FakeDataset` holding the
bytes, their sha256 and the arrays the files encode, so tests can compare decoded output.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from clusterbench.config.datasets import DATASETS, FileSpec

CIFAR_DIR = "cifar-10-batches-bin"


@dataclass(frozen=True)
class FakeFile:
    name: str
    path: Path
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)

    def spec(self, url: str | None = None, size: bool = True) -> FileSpec:
        """A :class:`FileSpec` pinning these bytes (``size=False``: size unknown)."""
        return FileSpec(self.name, url, self.sha256, self.size if size else None)


@dataclass
class FakeDataset:
    dataset: str
    files: dict[str, FakeFile]
    #: Images (N, H, W, C) uint8 as encoded in the files; test arrays are None for digits.
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    class_names: tuple[str, ...] = field(default_factory=tuple)

    def write_manifest(self, directory: Path | None = None) -> Path:
        """A MANIFEST.json for the files as they are on disk now, as stage 1 writes it."""
        directory = directory or next(iter(self.files.values())).path.parent
        path = directory / "MANIFEST.json"
        entries = {
            f.name: {
                "sha256": hashlib.sha256(f.path.read_bytes()).hexdigest(),
                "size": f.path.stat().st_size,
                "url": f.path.as_uri(),
            }
            for f in self.files.values()
        }
        path.write_text(json.dumps({"dataset": self.dataset, "files": entries}))
        return path


def _write(directory: Path, name: str, data: bytes) -> FakeFile:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return FakeFile(name, path, data)


def idx_bytes(array: np.ndarray) -> bytes:
    """Uncompressed IDX encoding of a uint8 array: magic 0x0000 08 <ndim>, big-endian dims."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def make_mnist(directory: Path, n_train: int = 60, n_test: int = 20, seed: int = 0) -> FakeDataset:
    """The four MNIST ``.gz`` IDX files with random 28x28 images and labels 0..9."""
    rng = np.random.default_rng(seed)
    x_train = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    x_test = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, n_train, dtype=np.uint8)
    y_test = rng.integers(0, 10, n_test, dtype=np.uint8)
    contents = {
        "train-images-idx3-ubyte.gz": x_train,
        "train-labels-idx1-ubyte.gz": y_train,
        "t10k-images-idx3-ubyte.gz": x_test,
        "t10k-labels-idx1-ubyte.gz": y_test,
    }
    files = {name: _write(directory, name, gz(idx_bytes(a))) for name, a in contents.items()}
    return FakeDataset(
        "mnist",
        files,
        x_train[..., None],
        y_train.astype(np.int64),
        x_test[..., None],
        y_test.astype(np.int64),
        DATASETS["mnist"].class_names,
    )


def cifar_records(images_hwc: np.ndarray, labels: np.ndarray) -> bytes:
    """CIFAR-10 binary records: one label byte, then the 32x32 image as R, G, B planes (CHW)."""
    chw = np.ascontiguousarray(images_hwc.transpose(0, 3, 1, 2)).reshape(len(labels), -1)
    rows = np.concatenate([labels.astype(np.uint8)[:, None], chw], axis=1)
    return rows.tobytes()


def tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_cifar10(
    directory: Path,
    per_batch: int = 8,
    n_test: int = 10,
    seed: int = 0,
    *,
    x_train: np.ndarray | None = None,
    y_train: np.ndarray | None = None,
    replace: dict[str, bytes | None] | None = None,
) -> FakeDataset:
    """``cifar-10-binary.tar.gz`` with 5 training batches of ``per_batch`` records each.

    ``x_train``/``y_train`` (5 * per_batch images, HWC) replace the random training data;
    ``replace`` replaces members' bytes by name (e.g. ``{"test_batch.bin": b"..."}``); ``None``
    leaves the member out.
    """
    rng = np.random.default_rng(seed)
    n_train = 5 * per_batch
    if x_train is None:
        x_train = rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8)
    if y_train is None:
        y_train = rng.integers(0, 10, n_train, dtype=np.uint8)
    x_test = rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8)
    y_test = rng.integers(0, 10, n_test, dtype=np.uint8)
    class_names = DATASETS["cifar10"].class_names
    members = {
        f"{CIFAR_DIR}/batches.meta.txt": ("\n".join(class_names) + "\n\n").encode(),
        f"{CIFAR_DIR}/readme.html": b"<html>fake</html>\n",
    }
    for i in range(5):
        part = slice(i * per_batch, (i + 1) * per_batch)
        members[f"{CIFAR_DIR}/data_batch_{i + 1}.bin"] = cifar_records(x_train[part], y_train[part])
    members[f"{CIFAR_DIR}/test_batch.bin"] = cifar_records(x_test, y_test)
    for name, data in (replace or {}).items():
        members.pop(f"{CIFAR_DIR}/{name}")
        if data is not None:
            members[f"{CIFAR_DIR}/{name}"] = data
    archive = _write(directory, "cifar-10-binary.tar.gz", tar_gz(members))
    return FakeDataset(
        "cifar10",
        {archive.name: archive},
        x_train,
        y_train.astype(np.int64),
        x_test,
        y_test.astype(np.int64),
        class_names,
    )


def make_digits(directory: Path, n: int = 50, seed: int = 0) -> FakeDataset:
    """``digits.csv.gz``: ``n`` rows of 64 random pixels 0..16 and a label 0..9.

    ``x_train`` holds the raw 0..16 values (N, 8, 8, 1), before the 0..255 scaling.
    """
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 17, (n, 64))
    labels = rng.integers(0, 10, n)
    lines = [
        ",".join(str(v) for v in [*row, label]) for row, label in zip(pixels, labels, strict=True)
    ]
    data = gz(("\n".join(lines) + "\n").encode("ascii"))
    file = _write(directory, "digits.csv.gz", data)
    return FakeDataset(
        "digits",
        {file.name: file},
        pixels.reshape(n, 8, 8, 1),
        labels.astype(np.int64),
        class_names=DATASETS["digits"].class_names,
    )
