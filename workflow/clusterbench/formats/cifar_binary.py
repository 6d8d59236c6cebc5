"""``format: cifar-binary``: a CIFAR-10-style binary tarball (the built-in ``cifar10``):
``data_batch_*.bin`` (training) and ``test_batch.bin`` (test) records of 1 label byte + 3072
bytes CHW 32x32 RGB, read in one streaming pass without extracting to disk; class names from
``batches.meta.txt`` when present."""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import numpy as np

from clusterbench.formats import FormatError, Images, check_classes, labels_as_classes

FILES = (1,)
SUFFIXES = (".tar.gz", ".tgz")
RESIZES = False

CIFAR_RECORD = 1 + 32 * 32 * 3


def cifar_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    if not data or len(data) % CIFAR_RECORD:
        raise FormatError(
            f"{where}: {len(data)} bytes is not a whole number of {CIFAR_RECORD}-byte records "
            "(truncated or corrupt)"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    images = np.ascontiguousarray(rows[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, rows[:, 0].astype(np.int64)


def read_members(path: Path) -> tuple[dict[str, bytes], dict[str, bytes], str | None]:
    """The archive's training batches and test batch by member path, and the class-names
    text (None when absent)."""
    train, test, meta = {}, {}, None
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                name = PurePosixPath(member.name).name
                if not member.isfile():
                    continue
                if name.startswith("data_batch_") and name.endswith(".bin"):
                    train[member.name] = archive.extractfile(member).read()
                elif name == "test_batch.bin":
                    test[member.name] = archive.extractfile(member).read()
                elif name == "batches.meta.txt":
                    meta = archive.extractfile(member).read().decode("utf-8", errors="replace")
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise FormatError(f"{path.name}: corrupt or truncated archive ({exc})") from exc
    if not train:
        raise FormatError(f"{path.name}: no data_batch_*.bin in the archive")
    return train, test, meta


def check_numbering(path: Path, train: dict[str, bytes]) -> None:
    """The training batches are ``data_batch_1.bin`` .. ``data_batch_N.bin``, none missing."""
    names = [PurePosixPath(m) for m in train]
    folder = names[0].parent
    numbers = sorted(int(n.stem.removeprefix("data_batch_") or 0) for n in names)
    missing = sorted(set(range(1, numbers[-1] + 1)) - set(numbers))
    if missing:
        shown = [str(folder / f"data_batch_{i}.bin") for i in missing]
        raise FormatError(f"{path.name}: missing {shown}")


def class_names_of(
    path: Path, meta: str | None, labels: np.ndarray, class_names: Sequence[str] | None
) -> tuple[str, ...]:
    """The classes: ``class_names`` when known (``batches.meta.txt`` must list as many), else
    the names the archive lists, else the label numbers."""
    listed = [line.strip() for line in (meta or "").splitlines() if line.strip()]
    if class_names is not None:
        if listed and len(listed) != len(class_names):
            raise FormatError(
                f"{path.name}: batches.meta.txt: {len(listed)} class names, expected "
                f"{len(class_names)}"
            )
        return tuple(class_names)
    k = int(labels.max()) + 1
    return tuple(listed) if len(listed) >= k else tuple(str(i) for i in range(k))


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    (path,) = files
    train, test, meta = read_members(path)
    check_numbering(path, train)
    order = sorted(train, key=lambda m: int(PurePosixPath(m).stem.removeprefix("data_batch_")))
    batches = [cifar_batch(train[m], f"{path.name}: {m}") for m in order]
    x_train = np.concatenate([x for x, _ in batches])
    y_train = np.concatenate([y for _, y in batches])
    x_test = y_test = None
    if test:
        member, data = next(iter(test.items()))
        x_test, y_test = cifar_batch(data, f"{path.name}: {member}")
    labels = y_train if y_test is None else np.concatenate([y_train, y_test])
    names = class_names_of(path, meta, labels, class_names)
    labels_as_classes(labels, names, path.name)  # labels index the names
    check_classes(names, path.name)
    return Images(x_train, y_train, x_test, y_test, names)
