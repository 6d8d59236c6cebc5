"""Stage 2: decoding the real digits file and generated MNIST / CIFAR-10 archives."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from archives import gz, idx_bytes, make_cifar10, make_digits, make_mnist
from clusterbench import download, formats, preprocess
from clusterbench.config import EXIT_BAD_SETTINGS
from clusterbench.config.datasets import DATASETS
from clusterbench.core import integrity
from conftest import REPO

DIGITS_PARAMS = {"val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 7}
# the generated MNIST and CIFAR-10 archives hold a few dozen images: any split size will do
OFFICIAL_PARAMS = {"val_fraction": 0.25, "test_fraction": 0.2, "split_seed": 7, "min_split_size": 1}


def run(dataset: str, manifest: Path, out: Path, params: dict | str) -> int:
    text = params if isinstance(params, str) else json.dumps(params)
    return preprocess.main(
        ["--dataset", dataset, "--manifest", str(manifest), "--params", text, "--out-dir", str(out)]
    )


def load(out: Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict]:
    arrays = {
        s: (np.load(out / f"{s}_x.npy"), np.load(out / f"{s}_y.npy")) for s in preprocess.SPLITS
    }
    return arrays, json.loads((out / "meta.json").read_text())


def locate(x: np.ndarray, original: np.ndarray) -> np.ndarray:
    """Index in ``original`` of each image of ``x`` (images of generated data are unique)."""
    index = {img.tobytes(): i for i, img in enumerate(original)}
    assert len(index) == len(original)
    return np.array([index[img.tobytes()] for img in x], dtype=np.int64)


def outputs(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


@pytest.fixture(scope="module")
def digits_manifest(tmp_path_factory) -> Path:
    """The real scikit-learn digits file, fetched by the download stage (file:// URL)."""
    root = tmp_path_factory.mktemp("digits")
    manifest = root / "raw" / "MANIFEST.json"
    params = json.dumps({"cache_dir": str(root / "cache")})
    assert download.main(["--dataset", "digits", "--params", params, "--out", str(manifest)]) == 0
    return manifest


# --------------------------------------------------------------------------- digits


def test_digits_real_file(digits_manifest, tmp_path):
    from sklearn.datasets import load_digits

    assert run("digits", digits_manifest, tmp_path, DIGITS_PARAMS) == 0
    arrays, meta = load(tmp_path)
    assert meta["counts"] == {"train": 1258, "val": 180, "test": 359}
    for x, y in arrays.values():
        assert x.dtype == np.uint8 and x.shape[1:] == (8, 8, 1) and x.flags.c_contiguous
        assert y.dtype == np.int64 and y.shape == (len(x),)
    # every example exactly once across the splits, pixels scaled 0..16 -> 0..255
    ref = load_digits()
    expected = np.rint(ref.images * 255 / 16).astype(np.uint8).reshape(-1, 64)
    rows = np.concatenate([np.c_[x.reshape(len(x), -1), y] for x, y in arrays.values()])
    want = np.c_[expected, ref.target]
    assert np.array_equal(np.unique(rows, axis=0), np.unique(want, axis=0))
    assert len(rows) == len(want)
    assert meta["dataset"] == "digits"
    assert meta["image_shape"] == [8, 8, 1]
    assert meta["num_classes"] == 10 and meta["class_names"] == [str(d) for d in range(10)]
    assert meta["source_sha256"] == {"digits.csv.gz": DATASETS["digits"].files[0].sha256}
    assert (meta["seed"], meta["val_fraction"], meta["test_fraction"]) == (7, 0.1, 0.2)
    assert outputs(tmp_path) == sorted(
        ["meta.json", *(f"{s}_{k}.npy" for s in preprocess.SPLITS for k in "xy")]
    )


def test_a_large_array_is_recorded_with_its_blocks_sha256(digits_manifest, tmp_path, monkeypatch):
    """Node-local staging checks a large file's blocks on several cores (clusterbench.data.
    staging): preprocessing records them, here with blocks of a page."""
    monkeypatch.setattr(integrity, "BLOCK", 4096)
    assert run("digits", digits_manifest, tmp_path, DIGITS_PARAMS) == 0
    files = json.loads((tmp_path / "meta.json").read_text())["files"]
    data = (tmp_path / "train_x.npy").read_bytes()
    assert len(data) > 4096 and files["train_x.npy"]["block"] == 4096
    assert files["train_x.npy"]["blocks"] == [
        hashlib.sha256(data[i : i + 4096]).hexdigest() for i in range(0, len(data), 4096)
    ]
    assert files["train_x.npy"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert "blocks" not in files["test_y.npy"]  # under one block: its sha256 alone
    assert integrity.problems(tmp_path, files) == []


def test_digits_scaling_of_generated_file(tmp_path):
    fake = make_digits(tmp_path / "raw", n=40)
    fake.x_train[0, 0, :3, 0] = (0, 8, 16)  # pin the interesting values
    decoded = formats.decode(DATASETS["digits"].format, [_rewrite_digits(fake)])
    assert decoded.x_train[0, 0, :3, 0].tolist() == [0, 128, 255]
    assert np.array_equal(decoded.x_train, np.rint(fake.x_train * 255 / 16).astype(np.uint8))
    assert np.array_equal(decoded.y_train, fake.y_train)


def _rewrite_digits(fake) -> Path:
    path = fake.files["digits.csv.gz"].path
    rows = np.c_[fake.x_train.reshape(len(fake.x_train), -1), fake.y_train]
    path.write_bytes(gz("\n".join(",".join(map(str, r)) for r in rows).encode()))
    return path


def test_split_is_deterministic_by_seed(digits_manifest, tmp_path):
    runs = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        assert (
            run("digits", digits_manifest, tmp_path / name, {**DIGITS_PARAMS, "split_seed": seed})
            == 0
        )
        runs[name] = load(tmp_path / name)[0]
    for split in preprocess.SPLITS:
        for k in range(2):
            assert np.array_equal(runs["a"][split][k], runs["b"][split][k])
    assert not np.array_equal(runs["a"]["val"][0], runs["c"]["val"][0])
    assert not np.array_equal(runs["a"]["test"][0], runs["c"]["test"][0])


# --------------------------------------------------------------------------- MNIST


def test_mnist(tmp_path):
    fake = make_mnist(tmp_path / "raw", n_train=60, n_test=20)
    assert run("mnist", fake.write_manifest(), tmp_path / "out", OFFICIAL_PARAMS) == 0
    arrays, meta = load(tmp_path / "out")
    assert meta["counts"] == {"train": 45, "val": 15, "test": 20}
    assert meta["image_shape"] == [28, 28, 1]
    assert meta["test_fraction"] is None  # MNIST has an official test split
    (xtr, ytr), (xva, yva), (xte, yte) = arrays["train"], arrays["val"], arrays["test"]
    assert xtr.dtype == np.uint8 and xtr.shape == (45, 28, 28, 1) and ytr.dtype == np.int64
    assert np.array_equal(xte, fake.x_test) and np.array_equal(yte, fake.y_test)
    train_idx, val_idx = locate(xtr, fake.x_train), locate(xva, fake.x_train)
    assert sorted([*train_idx, *val_idx]) == list(range(60))  # disjoint and complete
    assert np.array_equal(ytr, fake.y_train[train_idx])
    assert np.array_equal(yva, fake.y_train[val_idx])
    _assert_stats(xtr, meta)


def _assert_stats(x_train: np.ndarray, meta: dict) -> None:
    scaled = x_train.astype(np.float64) / 255
    np.testing.assert_allclose(meta["mean"], scaled.mean(axis=(0, 1, 2)), rtol=1e-12)
    np.testing.assert_allclose(meta["std"], scaled.std(axis=(0, 1, 2)), rtol=1e-12)


def _mnist_with(tmp_path: Path, name: str, data: bytes) -> Path:
    fake = make_mnist(tmp_path / "raw", n_train=30, n_test=10)
    fake.files[name].path.write_bytes(data)
    return fake.write_manifest()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "train-images-idx3-ubyte.gz",
            gz(b"\x00\x00\x08\x01" + b"\x00" * 40),
            "train-images-idx3-ubyte.gz: bad IDX magic number 0x00000801, expected 0x00000803",
        ),
        (
            "t10k-labels-idx1-ubyte.gz",
            gz(b"\x00\x00\x0d\x01" + b"\x00" * 14),
            "t10k-labels-idx1-ubyte.gz: bad IDX magic number 0x00000d01",
        ),
        (
            "train-images-idx3-ubyte.gz",
            gz(idx_bytes(np.zeros((30, 28, 28), np.uint8))[:-100]),
            r"header dimensions \(30, 28, 28\) need 23520 data bytes, the file has 23420",
        ),
        (
            "train-images-idx3-ubyte.gz",
            gz(idx_bytes(np.zeros((30, 28, 28), np.uint8)))[:-10],
            "train-images-idx3-ubyte.gz: corrupt or truncated gzip data",
        ),
        (
            "train-labels-idx1-ubyte.gz",
            gz(idx_bytes(np.zeros(29, np.uint8))),
            "has 30 images but train-labels-idx1-ubyte.gz has 29 labels",
        ),
        (
            "t10k-labels-idx1-ubyte.gz",
            gz(idx_bytes(np.full(10, 10, np.uint8))),
            r"labels must lie in 0\.\.9, found 10\.\.10",
        ),
        (
            "t10k-images-idx3-ubyte.gz",
            gz(idx_bytes(np.zeros((10, 28, 27), np.uint8))),
            r"t10k-images-idx3-ubyte\.gz: test images are \(28, 27, 1\), training images "
            r"\(28, 28, 1\)",
        ),
    ],
    ids=["magic", "magic-dtype", "truncated", "truncated-gzip", "count", "labels", "dims"],
)
def test_mnist_corrupt_inputs(tmp_path, capsys, name, data, message):
    manifest = _mnist_with(tmp_path, name, data)
    assert run("mnist", manifest, tmp_path / "out", OFFICIAL_PARAMS) == 1
    err = capsys.readouterr().err
    assert err.startswith("preprocess: error: ")
    assert re.search(message, err), err
    assert outputs(tmp_path / "out") == []


# --------------------------------------------------------------------------- CIFAR-10


def test_cifar10(tmp_path):
    fake = make_cifar10(tmp_path / "raw", per_batch=8, n_test=10)
    assert run("cifar10", fake.write_manifest(), tmp_path / "out", OFFICIAL_PARAMS) == 0
    arrays, meta = load(tmp_path / "out")
    assert meta["counts"] == {"train": 30, "val": 10, "test": 10}
    assert meta["image_shape"] == [32, 32, 3]
    assert meta["class_names"] == list(DATASETS["cifar10"].class_names)
    (xtr, ytr), (xva, _), (xte, yte) = arrays["train"], arrays["val"], arrays["test"]
    assert xtr.shape == (30, 32, 32, 3) and xtr.dtype == np.uint8 and ytr.dtype == np.int64
    assert np.array_equal(xte, fake.x_test) and np.array_equal(yte, fake.y_test)
    train_idx = locate(xtr, fake.x_train)
    assert sorted([*train_idx, *locate(xva, fake.x_train)]) == list(range(40))
    assert np.array_equal(ytr, fake.y_train[train_idx])
    _assert_stats(xtr, meta)
    assert len(meta["mean"]) == len(meta["std"]) == 3


def test_cifar10_channel_order_is_hwc(tmp_path):
    """A hand-built record: R plane = row-major ramp, G plane = 20, B plane = 30."""
    ramp = bytes((h * 32 + w) % 251 for h in range(32) for w in range(32))
    record = bytes([3]) + ramp + bytes([20]) * 1024 + bytes([30]) * 1024
    fake = make_cifar10(tmp_path / "raw", replace={"test_batch.bin": record * 2})
    assert run("cifar10", fake.write_manifest(), tmp_path / "out", OFFICIAL_PARAMS) == 0
    x, y = np.load(tmp_path / "out" / "test_x.npy"), np.load(tmp_path / "out" / "test_y.npy")
    assert x.shape == (2, 32, 32, 3) and y.tolist() == [3, 3]
    h, w = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    assert np.array_equal(x[0, :, :, 0], (h * 32 + w) % 251)
    assert x[0, 0, 1, 0] == 1 and x[0, 1, 0, 0] == 32  # width is the fast axis
    assert (x[:, :, :, 1] == 20).all() and (x[:, :, :, 2] == 30).all()


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ({"test_batch.bin": bytes(3073 * 2 - 100)}, "test_batch.bin: 6046 bytes is not a whole"),
        ({"data_batch_3.bin": None}, r"missing \['cifar-10-batches-bin/data_batch_3.bin'\]"),
        ({"batches.meta.txt": b"cat\ndog\n"}, "2 class names, expected 10"),
        ({"data_batch_1.bin": bytes([12]) + bytes(3072)}, r"labels must lie in 0\.\.9"),
    ],
    ids=["truncated-record", "missing-batch", "class-names", "label"],
)
def test_cifar10_corrupt_inputs(tmp_path, capsys, replace, message):
    fake = make_cifar10(tmp_path / "raw", replace=replace)
    assert run("cifar10", fake.write_manifest(), tmp_path / "out", OFFICIAL_PARAMS) == 1
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert outputs(tmp_path / "out") == []


def test_cifar10_truncated_archive(tmp_path, capsys):
    fake = make_cifar10(tmp_path / "raw")
    path = fake.files["cifar-10-binary.tar.gz"].path
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert run("cifar10", fake.write_manifest(), tmp_path / "out", OFFICIAL_PARAMS) == 1
    assert "cifar-10-binary.tar.gz: corrupt or truncated archive" in capsys.readouterr().err


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({**DIGITS_PARAMS, "val_fraction": 0}, "--params.val_fraction: 0 is less than or equal"),
        ({**DIGITS_PARAMS, "val_fraction": 1}, "--params.val_fraction: 1 is greater than or equal"),
        ({**DIGITS_PARAMS, "test_fraction": -0.1}, "--params.test_fraction: -0.1 is less than"),
        ({**DIGITS_PARAMS, "val_fraction": "0.1"}, "--params.val_fraction: '0.1' is not of type"),
        ({**DIGITS_PARAMS, "val_fraction": True}, "--params.val_fraction: True is not of type"),
        ({**DIGITS_PARAMS, "val_fraction": 0.5, "test_fraction": 0.5}, "leaves no training data"),
        ({"val_fraction": 0.1, "split_seed": 1}, "'test_fraction' is a required property"),
        ({**DIGITS_PARAMS, "split_seed": -1}, "--params.split_seed: -1 is less than the minimum"),
        ({**DIGITS_PARAMS, "split_seed": 1.5}, "--params.split_seed: 1.5 is not of type"),
        ({**DIGITS_PARAMS, "shuffle": True}, "'shuffle' was unexpected"),
        ({**DIGITS_PARAMS, "format": "hdf5"}, "--params.format: 'hdf5' is not one of"),
        ("[1]", "--params must be a JSON object"),
    ],
)
def test_bad_params_rejected_before_reading_anything(tmp_path, capsys, params, message):
    missing_manifest = tmp_path / "nowhere" / "MANIFEST.json"
    assert run("digits", missing_manifest, tmp_path / "out", params) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert message in err and "MANIFEST" not in err


def test_manifest_problems(tmp_path, capsys, digits_manifest):
    out = tmp_path / "out"
    assert run("digits", tmp_path / "none.json", out, DIGITS_PARAMS) == 1
    assert "manifest" in capsys.readouterr().err
    assert run("mnist", digits_manifest, out, OFFICIAL_PARAMS) == 1
    assert "is for dataset 'digits', not 'mnist'" in capsys.readouterr().err

    fake = make_mnist(tmp_path / "raw", n_train=10, n_test=5)
    manifest = fake.write_manifest()
    fake.files["t10k-labels-idx1-ubyte.gz"].path.write_bytes(b"tampered")
    assert run("mnist", manifest, out, OFFICIAL_PARAMS) == 1
    assert "t10k-labels-idx1-ubyte.gz does not match" in capsys.readouterr().err

    content = json.loads(manifest.read_text())
    del content["files"]["train-images-idx3-ubyte.gz"]
    manifest.write_text(json.dumps(content))
    assert run("mnist", manifest, out, OFFICIAL_PARAMS) == 1
    assert "lacks ['train-images-idx3-ubyte.gz']" in capsys.readouterr().err
    assert outputs(out) == []


def test_too_few_examples_for_a_split(tmp_path, capsys):
    fake = make_digits(tmp_path / "raw", n=3)
    params = {"val_fraction": 0.1, "test_fraction": 0.1, "split_seed": 0, "min_split_size": 1}
    assert run("digits", fake.write_manifest(), tmp_path / "out", params) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert "datasets.digits.val_fraction: the val split would hold 0 sample(s)" in err
    assert "datasets.digits.test_fraction: the test split would hold 0 sample(s)" in err
    assert outputs(tmp_path / "out") == []


@pytest.mark.parametrize(
    ("dataset", "params", "message"),
    [
        (  # the default minimum, 50: 60 generated images leave a val split of 15
            "mnist",
            {k: v for k, v in OFFICIAL_PARAMS.items() if k != "min_split_size"},
            "datasets.mnist.val_fraction: the val split would hold 15 sample(s) (val_fraction 0.25 "
            "of 60), fewer than min_split_size = 50",
        ),
        (
            "mnist",
            {**OFFICIAL_PARAMS, "min_split_size": 21},
            "datasets.mnist.min_split_size: the test split would hold 20 sample(s) (the official "
            "test split of 'mnist'), fewer than min_split_size = 21",
        ),
    ],
    ids=["val-default-minimum", "official-test"],
)
def test_a_split_below_the_minimum_is_refused_before_any_array_is_written(
    tmp_path, capsys, dataset, params, message
):
    """The workflow refuses a built-in dataset's tiny split before any job (its size is known);
    the stage checks the decoded data again, before writing anything."""
    fake = make_mnist(tmp_path / "raw", n_train=60, n_test=20)
    assert run(dataset, fake.write_manifest(), tmp_path / "out", params) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert err.startswith("preprocess: error: ") and message in err, err
    assert outputs(tmp_path / "out") == []


def test_the_real_digits_split_below_a_raised_minimum(digits_manifest, tmp_path, capsys):
    params = {**DIGITS_PARAMS, "min_split_size": 200}  # val: 180 of the 1797 images
    assert run("digits", digits_manifest, tmp_path / "out", params) == EXIT_BAD_SETTINGS
    assert "datasets.digits.val_fraction: the val split would hold 180 sample(s)" in (
        capsys.readouterr().err
    )
    assert outputs(tmp_path / "out") == []


def test_failed_rerun_removes_stale_marker(tmp_path):
    fake = make_mnist(tmp_path / "raw", n_train=20, n_test=5)
    out = tmp_path / "out"
    assert run("mnist", fake.write_manifest(), out, OFFICIAL_PARAMS) == 0
    path = fake.files["t10k-images-idx3-ubyte.gz"].path
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x02garbage"))
    assert run("mnist", fake.write_manifest(), out, OFFICIAL_PARAMS) == 1
    assert not (out / "meta.json").exists()


def test_script_entry_point(digits_manifest, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/preprocess.py",
            "--dataset",
            "digits",
            "--manifest",
            str(digits_manifest),
            "--params",
            json.dumps(DIGITS_PARAMS),
            "--out-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "meta.json").read_text())["counts"]["test"] == 359
