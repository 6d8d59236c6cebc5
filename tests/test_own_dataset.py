"""Bring your own dataset: declared in the config, downloaded, decoded and trained like a built-in.

The archives are made here (numpy, Pillow) and served from a real HTTP server on loopback.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from clusterbench import config as cb
from clusterbench import download, formats, preprocess
from clusterbench.config.datasets import DATASETS, DIGITS_SKLEARN_VERSION
from conftest import REPO, default_config, snakemake, write_config
from PIL import Image


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def blobs(n: int, classes: int, size: int = 8, channels: int = 1, seed: int = 0):
    """Learnable images: class k is bright in its own band of rows."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.integers(0, 60, size=(n, size, size, channels), dtype=np.uint8)
    for i, k in enumerate(y):
        band = slice(k * size // classes, (k + 1) * size // classes)
        x[i, band] = 230
    return x, y


def png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array.squeeze() if array.shape[-1] == 1 else array).save(buf, "PNG")
    return buf.getvalue()


def image_folder(path: Path, images: dict[str, list[np.ndarray]], top: str = "") -> Path:
    """A .zip or .tar.gz with one folder per class (under ``top`` when given)."""
    entries = {
        f"{top}{cls}/img{i}.png": png(a)
        for cls, arrays in images.items()
        for i, a in enumerate(arrays)
    }
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in entries.items():
                archive.writestr(name, data)
    else:
        with tarfile.open(path, "w:gz") as archive:
            for name, data in entries.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


# --------------------------------------------------------------------------- decoders


def test_npz_with_string_labels_takes_the_class_names_from_the_data(tmp_path):
    x, y = blobs(30, 3)
    path = tmp_path / "d.npz"
    path.write_bytes(npz_bytes(x=x[..., 0], y=np.array(["cat", "ant", "bee"])[y]))
    got = formats.decode("npz", [path])
    assert got.class_names == ("ant", "bee", "cat")
    assert got.x_train.shape == (30, 8, 8, 1) and got.x_train.dtype == np.uint8
    assert [got.class_names[k] for k in got.y_train[:3]] == ["cat", "ant", "bee"]


def test_npz_with_a_classes_array_and_integer_labels(tmp_path):
    x, y = blobs(20, 2, channels=3)
    path = tmp_path / "d.npz"
    path.write_bytes(npz_bytes(x=x, y=y, classes=np.array(["no", "yes"])))
    got = formats.decode("npz", [path])
    assert got.class_names == ("no", "yes") and got.x_train.shape[-1] == 3
    np.testing.assert_array_equal(got.y_train, y)


@pytest.mark.parametrize(
    "arrays, message",
    [
        (lambda x, y: {"x": x, "y": np.zeros(len(x), int)}, r"1 class\(es\) \['0'\].*at least 2"),
        (lambda x, y: {"x": x.astype(np.float32), "y": y}, "images must be uint8"),
        (lambda x, y: {"x": x, "y": y[:-1]}, "20 images in x but 19 labels in y"),
        (lambda x, y: {"y": y}, r"lacks array\(s\) \['x'\]"),
        (lambda x, y: {"x": x[:, :2, :2], "y": y}, "too small"),
    ],
)
def test_npz_rejections_name_the_file(tmp_path, arrays, message):
    x, y = blobs(20, 2)
    path = tmp_path / "bad.npz"
    path.write_bytes(npz_bytes(**arrays(x[..., 0], y)))
    with pytest.raises(formats.FormatError, match=rf"bad\.npz.*{message}"):
        formats.decode("npz", [path])


def test_a_truncated_npz_is_refused(tmp_path):
    x, y = blobs(20, 2)
    data = npz_bytes(x=x, y=y)
    path = tmp_path / "cut.npz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(formats.FormatError, match=r"cut\.npz: not a readable \.npz"):
        formats.decode("npz", [path])


@pytest.mark.parametrize("name, top", [("pics.zip", ""), ("pics.tar.gz", "pics/")])
def test_image_folder_archives(tmp_path, name, top):
    x, y = blobs(12, 3, size=10)
    images = {cls: [x[i] for i in range(12) if y[i] == k] for k, cls in enumerate("cab")}
    got = formats.decode("image-folder", [image_folder(tmp_path / name, images, top)])
    assert got.class_names == ("a", "b", "c")  # the folder names, sorted
    assert got.x_train.shape == (12, 10, 10, 1)  # greyscale PNGs stay one channel
    for k, cls in enumerate(got.class_names):
        first = images[cls][0][..., 0]
        match = [i for i in range(12) if got.y_train[i] == k]
        assert any(np.array_equal(got.x_train[i, ..., 0], first) for i in match)


def test_image_folder_of_mixed_sizes_needs_image_size(tmp_path):
    rgb = np.zeros((12, 16, 3), np.uint8)
    images = {"a": [rgb, np.zeros((10, 10, 3), np.uint8)], "b": [rgb]}
    path = image_folder(tmp_path / "mixed.zip", images)
    with pytest.raises(
        formats.FormatError, match=r"mixed\.zip: the images differ in size.*image_size"
    ):
        formats.decode("image-folder", [path])
    got = formats.decode("image-folder", [path], [8, 6])
    assert got.x_train.shape == (3, 8, 6, 3)


def test_image_folder_rejections(tmp_path):
    one_class = image_folder(tmp_path / "one.zip", {"only": [np.zeros((8, 8), np.uint8)] * 2})
    with pytest.raises(formats.FormatError, match=r"one\.zip: 1 class\(es\).*at least 2"):
        formats.decode("image-folder", [one_class])
    loose = tmp_path / "loose.zip"
    with zipfile.ZipFile(loose, "w") as archive:
        archive.writestr("img.png", png(np.zeros((8, 8, 1), np.uint8)))
    with pytest.raises(formats.FormatError, match="not in a class folder"):
        formats.decode("image-folder", [loose])
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("a/x.png", b"not a png")
        archive.writestr("b/y.png", png(np.zeros((8, 8, 1), np.uint8)))
    with pytest.raises(formats.FormatError, match=r"broken\.zip: a/x\.png is not a readable image"):
        formats.decode("image-folder", [broken])


def test_idx_files_with_an_official_test_split(tmp_path):
    from test_preprocess import make_mnist

    fake = make_mnist(tmp_path / "raw", n_train=20, n_test=5)
    order = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
    order += ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    got = formats.decode("idx", [fake.files[n].path for n in order])
    assert got.x_train.shape == (20, 28, 28, 1) and got.x_test.shape == (5, 28, 28, 1)
    assert len(got.class_names) >= 2


# --------------------------------------------------------------------------- config


def declared(name: str = "mine", **entry) -> dict:
    cfg = default_config()
    cfg["datasets"] = {name: entry}
    cfg["runs"] = [{**cfg["runs"][0], "dataset": name}]
    return cfg


FILE = {"url": "http://127.0.0.1:1/data.npz", "sha256": "a" * 64}


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"format": "hdf5", "files": [FILE]}, r"datasets\.mine\.format: 'hdf5' is not one of"),
        (
            {"format": "npz", "files": [{"url": FILE["url"]}]},
            r"datasets\.mine\.files\[0\]: 'sha256' is a required property",
        ),
        (
            {"format": "npz", "files": [{**FILE, "sha256": "xyz"}]},
            r"datasets\.mine\.files\[0\]\.sha256: 'xyz' does not match",
        ),
        (
            {"files": [FILE]},
            r"datasets\.mine: 'mine' is not a built-in dataset .* declare its format",
        ),
        ({"format": "npz"}, r"datasets\.mine: .* declare its files"),
        ({"format": "npz", "files": [FILE, FILE]}, r"datasets\.mine\.files: format npz takes 1"),
        (
            {"format": "npz", "files": [FILE], "image_size": [8, 8]},
            r"datasets\.mine\.image_size: only image-folder and imagenet datasets are resized",
        ),
        (
            {"format": "image-folder", "files": [FILE]},
            r"datasets\.mine\.files\[0\]: format image-folder takes a file ending in \.zip",
        ),
        (
            {"format": "npz", "files": [{**FILE, "url": "ftp://h/d.npz"}]},
            r"datasets\.mine\.files\[0\]\.url: 'ftp://h/d\.npz' does not match",
        ),
    ],
)
def test_declared_dataset_rejections_name_the_key(entry, message):
    with pytest.raises(cb.ConfigError, match=message):
        cb.validate(declared(**entry))


def test_a_built_in_name_cannot_be_redeclared_and_names_must_be_file_names():
    with pytest.raises(cb.ConfigError, match=r"datasets\.digits\.format: 'digits' is a built-in"):
        cb.validate(declared("digits", format="npz", files=[FILE]))
    with pytest.raises(cb.ConfigError, match=r"datasets: 'my data' does not match"):
        cb.validate(declared("my data", format="npz", files=[FILE]))


def test_declared_slices_carry_the_files_and_how_to_read_them():
    cfg = cb.validate(declared(format="npz", files=[FILE]))
    ds = cfg["datasets"]["mine"]
    assert cb.download_slice(ds) == {"source": {}, "declared": [{**FILE, "name": "data.npz"}]}
    assert cb.preprocess_slice(ds) == {
        "val_fraction": 0.1,
        "test_fraction": 0.2,
        "split_seed": 0,
        "min_split_size": 50,
        "format": "npz",
        "files": ["data.npz"],
    }


# --------------------------------------------------------------------------- stages


def preprocess_declared(
    server, tmp_path: Path, name: str, data: bytes, fmt: str, **extra
) -> tuple[int, Path]:
    """Download (from loopback) and preprocess a declared dataset with the workflow's params:
    the preprocess exit status and its output folder."""
    url = server.add(name, data)
    cfg = cb.validate(declared(format=fmt, files=[{"url": url, "sha256": sha256(data)}], **extra))
    ds = cfg["datasets"]["mine"]
    raw = tmp_path / "raw"
    settings = {"cache_dir": str(tmp_path / "cache"), "retries": 0}
    params = json.dumps({**cb.download_slice(ds), **settings})
    manifest = raw / "MANIFEST.json"
    assert download.main(["--dataset", "mine", "--params", params, "--out", str(manifest)]) == 0
    out = tmp_path / "data"
    argv = ["--dataset", "mine", "--manifest", str(manifest)]
    argv += ["--params", json.dumps(cb.preprocess_slice(ds)), "--out-dir", str(out)]
    return preprocess.main(argv), out


def run_stages(server, tmp_path: Path, name: str, data: bytes, fmt: str, **extra) -> dict:
    """Download (from loopback) and preprocess a declared dataset; its meta.json."""
    status, out = preprocess_declared(server, tmp_path, name, data, fmt, **extra)
    assert status == 0
    return json.loads((out / "meta.json").read_text())


def test_declared_npz_goes_through_download_and_preprocess(server, tmp_path):
    x, y = blobs(100, 4)
    data = npz_bytes(x=x, y=np.array(list("wxyz"))[y])
    meta = run_stages(server, tmp_path, "d.npz", data, "npz", min_split_size=10)  # val: 10
    assert meta["class_names"] == ["w", "x", "y", "z"] and meta["num_classes"] == 4
    assert meta["image_shape"] == [8, 8, 1]
    assert sum(meta["counts"].values()) == 100


def test_declared_image_folder_is_resized_to_image_size(server, tmp_path):
    x, y = blobs(12, 2, size=12, channels=3)
    path = image_folder(
        tmp_path / "p.tar.gz",
        {c: [x[i] for i in range(12) if y[i] == k] for k, c in enumerate("ab")},
    )
    meta = run_stages(
        server,
        tmp_path,
        "p.tar.gz",
        path.read_bytes(),
        "image-folder",
        image_size=[6, 8],
        min_split_size=1,  # 12 images
    )
    assert meta["image_shape"] == [6, 8, 3] and meta["class_names"] == ["a", "b"]


def test_a_declared_file_with_the_wrong_checksum_is_refused(server, tmp_path, capsys):
    url = server.add("d.npz", b"not what was declared")
    params = {"source": {}, "declared": [{"url": url, "sha256": "0" * 64, "name": "d.npz"}]}
    params.update(cache_dir=str(tmp_path / "cache"), retries=0)
    argv = ["--dataset", "mine", "--params", json.dumps(params), "--out", str(tmp_path / "M")]
    assert download.main(argv) == 1
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not (tmp_path / "M").exists()


def test_a_declared_dataset_too_small_for_its_splits_is_refused_before_anything_is_written(
    server, tmp_path, capsys
):
    """Its size is known only once downloaded: preprocess refuses it as bad settings, naming
    the key, the split, its size and the minimum (the default, 50), and writes no array."""
    x, y = blobs(100, 4)
    data = npz_bytes(x=x, y=np.array(list("wxyz"))[y])
    status, out = preprocess_declared(server, tmp_path, "d.npz", data, "npz")
    assert status == cb.EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert err.startswith(
        "preprocess: error: datasets.mine.val_fraction: the val split would hold "
        "10 sample(s) (val_fraction 0.1 of 100), fewer than min_split_size = 50"
    ), err
    assert "datasets.mine.test_fraction: the test split would hold 20 sample(s)" in err
    assert not out.exists() or not list(out.iterdir())
    # the same data with a lower minimum goes through
    status, out = preprocess_declared(server, tmp_path, "d.npz", data, "npz", min_split_size=10)
    assert status == 0 and json.loads((out / "meta.json").read_text())["counts"] == {
        "train": 70,
        "val": 10,
        "test": 20,
    }


def test_a_corrupt_declared_file_fails_preprocess_naming_it(server, tmp_path, capsys):
    data = npz_bytes(x=np.zeros((4, 8, 8), np.uint8), y=np.zeros(4, int))  # one class
    with pytest.raises(AssertionError):
        run_stages(server, tmp_path, "one.npz", data, "npz")
    assert "dataset 'mine' (npz): one.npz: 1 class(es)" in capsys.readouterr().err


# --------------------------------------------------------------------------- scikit-learn digits


def test_a_changed_bundled_digits_file_says_which_scikit_learn_to_install(
    tmp_path, monkeypatch, capsys
):
    spec = DATASETS["digits"]
    source = tmp_path / "sklearn" / spec.files[0].name
    source.parent.mkdir()
    source.write_bytes(b"digits of another scikit-learn release")
    monkeypatch.setattr(
        "clusterbench.config.datasets._SKLEARN_DATA_URL", source.parent.as_uri() + "/"
    )
    monkeypatch.setattr("importlib.metadata.version", lambda dist: "9.9.9")
    params = {"source": {"files": {spec.files[0].name: {"url": source.as_uri()}}}}
    params.update(cache_dir=str(tmp_path / "cache"))
    argv = ["--dataset", "digits", "--params", json.dumps(params), "--out", str(tmp_path / "M")]
    assert download.main(argv) == 1
    err = capsys.readouterr().err
    assert f"pinned to the copy in scikit-learn {DIGITS_SKLEARN_VERSION}" in err
    assert "scikit-learn 9.9.9 is installed here" in err
    assert f"Install scikit-learn=={DIGITS_SKLEARN_VERSION}" in err


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_declared_dataset_runs_through_the_whole_workflow(server, tmp_path):
    x, y = blobs(240, 3, seed=1)
    data = npz_bytes(x=x[..., 0], y=np.array(["circle", "line", "square"])[y])
    url = server.add("shapes.npz", data)
    cfg = declared(
        "shapes", format="npz", files=[{"url": url, "sha256": sha256(data)}], min_split_size=20
    )  # 240 images: 168 / 24 / 48
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["runs"] = [{**cfg["runs"][0], "name": "shapes-1w", "workers": 1, "epochs": 3}]
    write_config(tmp_path, cfg)
    snakemake(tmp_path, "--profile", str(REPO / "profiles" / "local"))
    res = tmp_path / "results"
    meta = json.loads((res / "data" / "shapes" / "meta.json").read_text())
    assert meta["class_names"] == ["circle", "line", "square"]
    per_class = (res / "eval" / "shapes-1w" / "per_class.csv").read_text()
    assert all(name in per_class for name in meta["class_names"])
    runs = (res / "report" / "runs.csv").read_text()
    assert "shapes" in runs and (res / "report" / "report.pdf").is_file()
