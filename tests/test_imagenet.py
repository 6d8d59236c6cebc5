"""``format: imagenet`` on a miniature with the real structure (tests/imagenet_mini.py): nested
tars, a real ``meta.mat`` (scipy.io.savemat) with inner WordNet nodes among its synsets, a
ground-truth file; and the same extracted into folders. The preprocess stage's ``main``, the
loader's reader, what is refused (naming the file) before anything is written."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from clusterbench import preprocess
from clusterbench.config import ConfigError, validate
from clusterbench.data.folder import FileReader, Sources, read_index
from clusterbench.pipeline.checks import folder_problem
from conftest import default_config
from imagenet_mini import LEAVES, extracted, make, meta_mat

PARAMS = {
    "format": "imagenet",
    "val_fraction": 0.25,
    "test_fraction": 0.2,
    "split_seed": 0,
    "min_split_size": 4,
    "storage": "files",
}


def index(tmp_path: Path, folder: Path, **params) -> tuple[int, Path]:
    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    manifest = raw / "MANIFEST.json"
    manifest.write_text(json.dumps({"dataset": "inet", "path": str(folder), "files": {}}))
    out = tmp_path / "data"
    argv = ["--dataset", "inet", "--manifest", str(manifest), "--out-dir", str(out)]
    return preprocess.main([*argv, "--params", json.dumps({**PARAMS, **params})]), out


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return make(tmp_path_factory.mktemp("imagenet") / "ILSVRC2012")


@pytest.mark.parametrize("layout", ["official files", "extracted folders"])
def test_imagenet_is_read_in_place_with_the_devkits_classes_and_labels(mini, tmp_path, layout):
    folder = mini.folder if layout == "official files" else extracted(mini, tmp_path / "x")
    status, data = index(tmp_path, folder)
    assert status == 0
    meta = json.loads((data / "meta.json").read_text())
    # the leaves only (the inner nodes ignored), in WNID order, named by WNID and first word
    assert meta["class_names"] == [
        "n01440764 tench",
        "n01443537 goldfish",
        "n01484850 great white shark",
        "n01491361 tiger shark",
    ]
    n_train = len(LEAVES) * mini.train_per_class
    # the official validation images are the test split; val is carved from training
    assert meta["counts"] == {"train": n_train - 12, "val": 12, "test": len(mini.val_wnids)}
    assert sorted(p.name for p in data.iterdir()) == ["index.npz", "meta.json"]  # no copy
    idx = read_index(data, meta)
    test = idx.rows("test")
    names = [idx.name(int(r)) for r in test]
    assert names == [f"ILSVRC2012_val_{n + 1:08d}.JPEG" for n in range(len(names))]  # in order
    wnids = [meta["class_names"][int(idx.columns["label"][r])].split()[0] for r in test]
    assert wnids == mini.val_wnids  # labelled from the ground truth by ILSVRC2012_ID
    sources = Sources(data, idx)
    with tarfile.open(mini.folder / "ILSVRC2012_img_train.tar") as outer:
        inner = tarfile.open(fileobj=outer.extractfile("n01484850.tar"))
        want = inner.extractfile("n01484850_3.JPEG").read()
    row = next(i for i, n in enumerate(idx.names()) if n.endswith("n01484850_3.JPEG"))
    assert bytes(sources.read(row)) == want  # read at its offset in the nested tars
    reader = FileReader(sources, idx, (16, 16), meta["channels"], "standard", 0)
    x, y, _, bad = reader.read("train", 0, __import__("numpy").arange(6))
    assert tuple(x.shape) == (6, 16, 16, 3) and bad == []


def rebuilt(tmp_path: Path, **devkit) -> Path:
    return make(tmp_path / "ILSVRC2012", train_per_class=6, val=8, **devkit).folder


@pytest.mark.parametrize(
    "broken, message",
    [
        (
            lambda t: rebuilt(t, meta=meta_mat(fields=("ILSVRC2012_ID", "WNID", "gloss"))),
            r"ILSVRC2012_devkit_t12\.tar\.gz: its data/meta\.mat holds no 'synsets' with the "
            r"fields ILSVRC2012_ID, WNID, words, num_children .*not the ILSVRC2012 devkit",
        ),
        (
            lambda t: rebuilt(t, meta=b"MATLAB 5.0 MAT-file, but not really"),
            r"its data/meta\.mat holds no 'synsets'",
        ),
        (
            lambda t: rebuilt(t, truth_lines=5),
            r"its data/ILSVRC2012_validation_ground_truth\.txt holds 5 label\(s\), "
            r".*ILSVRC2012_img_val\.tar holds 8 validation image\(s\)",
        ),
        (
            lambda t: rebuilt(t, truth=b"1\n2\n9\n1\n1\n1\n1\n1\n"),
            r"line 3 of data/ILSVRC2012_validation_ground_truth\.txt is ILSVRC2012_ID 9, no "
            r"leaf class",
        ),
    ],
    ids=[
        "devkit of another layout",
        "meta.mat not a mat file",
        "ground truth too short",
        "unknown ID",
    ],
)
def test_a_broken_imagenet_is_refused_naming_the_file_before_anything_is_written(
    tmp_path, capsys, broken, message
):
    import re

    folder = broken(tmp_path)
    status, data = index(tmp_path, folder)
    err = capsys.readouterr().err
    assert status == 1 and re.search(message, err), err
    assert "Traceback" not in err and not data.exists()


def test_a_devkit_without_its_files_and_a_missing_file_are_named(tmp_path, capsys):
    folder = rebuilt(tmp_path)
    devkit = folder / "ILSVRC2012_devkit_t12.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("ILSVRC2010_devkit/data/meta.mat")
        data = meta_mat()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    devkit.write_bytes(buf.getvalue())
    status, _ = index(tmp_path, folder)
    err = capsys.readouterr().err
    assert status == 1
    assert f"{devkit} has no data/ILSVRC2012_validation_ground_truth.txt" in err
    assert "not the ILSVRC2012 devkit's layout" in err
    (folder / "ILSVRC2012_img_val.tar").unlink()
    assert folder_problem("inet", folder, "imagenet") == (
        f"datasets.inet.path: {folder} lacks ImageNet's ILSVRC2012_img_val.tar (or its "
        "extracted val/)"
    )
    status, _ = index(tmp_path / "again", folder)
    assert status == 1 and "ILSVRC2012_img_val.tar (or its extracted val/) is missing" in (
        capsys.readouterr().err
    )


def test_imagenet_needs_a_path_and_is_stored_as_files():
    cfg = default_config()
    cfg["runs"] = [{**cfg["runs"][0], "dataset": "inet"}]
    cfg["datasets"] = {"inet": {"format": "imagenet"}}
    with pytest.raises(
        ConfigError, match=r"datasets\.inet: format imagenet is read in place: give path"
    ):
        validate(cfg)
    cfg["datasets"] = {
        "inet": {"format": "imagenet", "path": "/data/imagenet", "storage": "arrays"}
    }
    with pytest.raises(
        ConfigError, match=r"datasets\.inet\.storage: arrays, but /data/imagenet is read in place"
    ):
        validate(cfg)
    cfg["datasets"] = {"inet": {"format": "imagenet", "path": "/data/imagenet"}}
    assert validate(cfg)["datasets"]["inet"]["storage"] == "files"
