"""Built-in dataset registry: where each dataset's files come from and what they must hash to.

The Snakefile imports this module at parse time, so it uses the standard library only.

Every file is pinned by sha256 and size; where the dataset's authors publish an md5 (MNIST, via
torchvision, and CIFAR-10) it is pinned as well and both are verified. The config may point a
dataset at another ``mirror`` (a base URL the file names are appended to) or give a file its own
``url``; the checksums stay pinned whatever the source.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

#: URL schemes the downloader understands.
URL_SCHEMES = ("http", "https", "file")


class DatasetError(ValueError):
    """An unknown dataset, or a source override that cannot be used."""


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset, as published."""

    name: str
    #: Default URL; ``None`` when it cannot be built here (scikit-learn not installed).
    url: str | None
    sha256: str
    #: Size in bytes, ``None`` if unknown.
    size: int | None
    #: The md5 the dataset's authors publish, verified in addition to sha256 when set.
    md5: str | None = None

    def digests(self) -> dict[str, str]:
        """Pinned digests by ``hashlib`` algorithm name."""
        pinned = {"sha256": self.sha256}
        if self.md5 is not None:
            pinned["md5"] = self.md5
        return pinned


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    files: tuple[FileSpec, ...]
    #: How its files are decoded: a plugin of clusterbench.formats (a declared dataset's is the
    #: config's ``format``).
    format: str
    #: Shape of one image, (height, width, channels); None for a declared dataset (its data
    #: tells).
    image_shape: tuple[int, int, int] | None
    class_names: tuple[str, ...]
    #: Whether the dataset ships an official test split (otherwise one is held out).
    official_test_split: bool
    #: Samples in the published training data (val, and without an official test split also
    #: test, are held out of it) and in the official test split; None: unknown until decoded
    #: (a declared dataset), or no official test split.
    train_samples: int | None = None
    test_samples: int | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.files)

    def file(self, name: str) -> FileSpec:
        for f in self.files:
            if f.name == name:
                return f
        raise DatasetError(f"dataset {self.name!r} has no file {name!r}")


def _sklearn_data_url() -> str | None:
    """``file://`` URL of scikit-learn's bundled data directory, without importing sklearn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    data_dir = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return data_dir.resolve().as_uri() + "/"


_SKLEARN_DATA_URL = _sklearn_data_url()
#: The scikit-learn release whose bundled digits.csv.gz the digits checksum pins (pyproject.toml
#: pins the same version: tests/test_deps.py).
DIGITS_SKLEARN_VERSION = "1.9.1"
MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
CIFAR10_MIRROR = "https://www.cs.toronto.edu/~kriz/"

DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(
        name="digits",
        description="UCI 8x8 handwritten digits as bundled with scikit-learn (offline)",
        format="digits-csv",
        files=(
            FileSpec(
                name="digits.csv.gz",
                url=None if _SKLEARN_DATA_URL is None else _SKLEARN_DATA_URL + "digits.csv.gz",
                # sklearn/datasets/data/digits.csv.gz of scikit-learn DIGITS_SKLEARN_VERSION
                sha256="09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
                size=57523,
            ),
        ),
        image_shape=(8, 8, 1),
        class_names=tuple(str(d) for d in range(10)),
        official_test_split=False,
        train_samples=1797,
    ),
    "mnist": DatasetSpec(
        name="mnist",
        description="MNIST handwritten digits, IDX format",
        format="idx",
        files=(
            FileSpec(
                name="train-images-idx3-ubyte.gz",
                url=MNIST_MIRROR + "train-images-idx3-ubyte.gz",
                sha256="440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                size=9912422,
                md5="f68b3c2dcbeaaa9fbdd348bbdeb94873",
            ),
            FileSpec(
                name="train-labels-idx1-ubyte.gz",
                url=MNIST_MIRROR + "train-labels-idx1-ubyte.gz",
                sha256="3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                size=28881,
                md5="d53e105ee54ea40749a09fcbcd1e9432",
            ),
            FileSpec(
                name="t10k-images-idx3-ubyte.gz",
                url=MNIST_MIRROR + "t10k-images-idx3-ubyte.gz",
                sha256="8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                size=1648877,
                md5="9fb629c4189551a2d022fa330f9573f3",
            ),
            FileSpec(
                name="t10k-labels-idx1-ubyte.gz",
                url=MNIST_MIRROR + "t10k-labels-idx1-ubyte.gz",
                sha256="f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                size=4542,
                md5="ec29112dd5afa0611ce80d1b7f02629c",
            ),
        ),
        image_shape=(28, 28, 1),
        class_names=tuple(str(d) for d in range(10)),
        official_test_split=True,
        train_samples=60000,
        test_samples=10000,
    ),
    "cifar10": DatasetSpec(
        name="cifar10",
        description="CIFAR-10, binary version (never the pickled Python version)",
        format="cifar-binary",
        files=(
            FileSpec(
                name="cifar-10-binary.tar.gz",
                url=CIFAR10_MIRROR + "cifar-10-binary.tar.gz",
                sha256="c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
                size=170052171,
                md5="c32a1d4ab5d03f1284b67883e8d87530",
            ),
        ),
        image_shape=(32, 32, 3),
        class_names=(
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ),
        official_test_split=True,
        train_samples=50000,
        test_samples=10000,
    ),
}


def get_dataset(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}"
        ) from None


def _check_url(url: Any, what: str) -> str:
    if not isinstance(url, str) or urlsplit(url).scheme not in URL_SCHEMES:
        raise DatasetError(f"{what} must be an {'/'.join(URL_SCHEMES)} URL, got {url!r}")
    if any(ch.isspace() for ch in url) or not urlsplit(url).netloc and url.startswith("http"):
        raise DatasetError(f"{what} is a malformed URL (spaces, or no host): {url!r}")
    return url


def resolve_urls(name: str, source: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The URL each file of dataset ``name`` is fetched from, file name -> URL.

    ``source`` is the dataset's config entry: ``{"mirror": base_url, "files": {file_name:
    {"url": url}}}``, both optional. A per-file ``url`` wins over ``mirror``, which wins over the
    built-in default.
    """
    spec = get_dataset(name)
    source = dict(source or {})
    unknown = set(source) - {"mirror", "files"}
    if unknown:
        raise DatasetError(
            f"dataset {name!r}: unknown source keys {sorted(unknown)} (allowed: mirror, files)"
        )
    mirror = source.get("mirror")
    if mirror is not None:
        mirror = _check_url(mirror, f"dataset {name!r}: mirror")
        mirror = mirror if mirror.endswith("/") else mirror + "/"
    overrides = source.get("files") or {}
    if not isinstance(overrides, Mapping):
        raise DatasetError(f"dataset {name!r}: 'files' must be a mapping, got {overrides!r}")
    for file_name, entry in overrides.items():
        spec.file(file_name)  # raises for a file the dataset does not have
        if not isinstance(entry, Mapping) or set(entry) - {"url"}:
            raise DatasetError(
                f"dataset {name!r}: files.{file_name} must be {{'url': URL}}, got {entry!r}"
            )

    urls: dict[str, str] = {}
    for f in spec.files:
        url = (overrides.get(f.name) or {}).get("url")
        if url is not None:
            urls[f.name] = _check_url(url, f"dataset {name!r}: files.{f.name}.url")
        elif mirror is not None:
            urls[f.name] = mirror + f.name
        elif f.url is not None:
            urls[f.name] = f.url
        else:
            raise DatasetError(
                f"dataset {name!r}: no URL for {f.name} (scikit-learn is not installed); "
                "set a mirror or a per-file url in the config"
            )
    return urls


_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def declared_file_name(entry: Mapping[str, Any]) -> str:
    """The name a declared dataset's file is stored under: its ``name``, else the last part of
    its ``url``'s path."""
    name = entry.get("name") or unquote(urlsplit(str(entry.get("url", ""))).path).rsplit("/", 1)[-1]
    if not _FILE_NAME.match(name) or len(name) > 200:
        raise DatasetError(
            f"cannot use {name!r} (from url {entry.get('url')!r}) as a file name: give the file "
            "a 'name' of letters, digits, '.', '_' and '-'"
        )
    return name


def declared_spec(
    name: str, files: Iterable[Mapping[str, Any]], format: str | None = None
) -> DatasetSpec:
    """The spec of a dataset declared in the config (``datasets.<name>``: its ``format`` and
    ``files`` with their ``name``, ``url``, ``sha256`` and optional ``size``); its images and
    classes come from the data."""
    return DatasetSpec(
        name=name,
        description="declared in the config",
        format=format or "",
        files=tuple(
            FileSpec(name=f["name"], url=f["url"], sha256=f["sha256"], size=f.get("size"))
            for f in files
        ),
        image_shape=None,
        class_names=(),
        official_test_split=False,
    )


def bundled_file_hint(spec: DatasetSpec, file: FileSpec, url: str) -> str | None:
    """Why the digits file that scikit-learn bundles may fail its checksum, and the fix; None
    for any other file or source."""
    if spec.name != "digits" or _SKLEARN_DATA_URL is None or not url.startswith(_SKLEARN_DATA_URL):
        return None
    try:
        installed = importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        installed = "unknown"
    return (
        f"The digits dataset is the {file.name} that scikit-learn bundles, pinned to the copy in "
        f"scikit-learn {DIGITS_SKLEARN_VERSION}; scikit-learn {installed} is installed here"
        + (" and bundles another file" if installed != DIGITS_SKLEARN_VERSION else "")
        + f". Install scikit-learn=={DIGITS_SKLEARN_VERSION} as pyproject.toml pins it "
        "(make setup), or point datasets.digits.urls at a copy of that file."
    )
