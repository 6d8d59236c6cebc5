"""The data sources and their pure parts: the loading decision, augmentation, the storage a
dataset gets from its runs, streamed batches against resident ones, an image folder stored as
files (extracted, indexed, decoded, its bad files named or skipped), the record in run.json.

No training here: the sources are asked for batches directly (loader processes included).
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from clusterbench import config as cb
from clusterbench.config import storage
from clusterbench.data import DataError, augment, loading, record
from clusterbench.data.order import global_batches
from clusterbench.data.source import Reading, check, open_source
from conftest import REPO, default_config
from PIL import Image
from test_train import make_dataset, run_config

CPU = torch.device("cpu")


def children() -> list[int]:
    """This process's child processes (loader processes among them)."""
    tid = os.getpid()
    return [int(p) for p in Path(f"/proc/{tid}/task/{tid}/children").read_text().split()]


def reading(loading_setting: str, workers: int | None = 0, **kw) -> Reading:
    return Reading({"loading": loading_setting, "loader_workers": workers}, 1, 2, **kw)


def data_run(**overrides) -> dict:
    return {**run_config(), "augment": "auto", "on_bad_file": "fail", **overrides}


# --------------------------------------------------------------------------------------------
# loading: auto


GIB = 1 << 30


@pytest.mark.parametrize(
    "setting, storage_, data, ranks, decision, why",
    [
        ("auto", "arrays", GIB, 2, "resident", "fit in 50% of 8.0 GiB"),
        ("auto", "arrays", 3 * GIB, 2, "stream", "= 6.0 GiB exceed 50% of 8.0 GiB"),
        ("resident", "arrays", 30 * GIB, 2, "resident", "loading: resident"),
        ("stream", "arrays", 1, 1, "stream", "loading: stream"),
        ("auto", "files", 0, 1, "stream", "stored as image files"),
    ],
)
def test_auto_is_resident_when_the_nodes_copies_fit_in_the_memory_share(
    setting, storage_, data, ranks, decision, why
):
    got = loading.decide(setting, storage_, data, ranks, (8 * GIB, "the node's memory"), 0.5)
    assert got.loading == decision and why in got.reason, got


def test_auto_streams_what_does_not_fit_the_gpu_and_names_the_cgroup_limit(tmp_path):
    got = loading.decide("auto", "arrays", 3 * GIB, 1, (64 * GIB, "x"), 0.5, gpu_memory=4 * GIB)
    assert got.loading == "stream" and "GPU's 4.0 GiB" in got.reason
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       16384000 kB\n")
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/job/step\n")
    limit = tmp_path / "sys" / "fs" / "cgroup" / "job" / "step" / "memory.max"
    limit.parent.mkdir(parents=True)
    limit.write_text("2147483648\n")
    assert loading.node_memory(tmp_path) == (2 * GIB, "the job's cgroup memory limit")
    limit.write_text("max\n")
    assert loading.node_memory(tmp_path) == (16384000 * 1024, "the node's memory")


def test_the_memory_fraction_is_the_schemas_and_loader_workers_default_to_cpus_less_one():
    assert cb.RESIDENT_MEMORY_FRACTION == 0.5
    assert [loading.loader_workers(None, cpus) for cpus in (1, 2, 4, 32)] == [1, 1, 3, 8]
    assert loading.loader_workers(0, 16) == 0


# --------------------------------------------------------------------------------------------
# augmentation


def test_crop_flip_pads_crops_and_flips_each_image_by_its_row():
    images = torch.arange(3 * 8 * 8 * 2, dtype=torch.uint8).reshape(3, 8, 8, 2) + 1
    # as it was; flipped; shifted (2 rows down, 2 columns left: padded rows 2.., columns 6..)
    params = torch.tensor([[4, 4, 0], [4, 4, 1], [2, 6, 0]])
    out = augment.crop_flip(images, params)
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert torch.equal(out[0], images[0])
    assert torch.equal(out[1], images[1].flip(1))
    assert torch.equal(out[2, 2:, :6], images[2, :6, 2:])
    assert not out[2, :2].any() and not out[2, :, 6:].any()  # the zero padding


def test_the_augmentation_draws_are_keyed_by_seed_epoch_and_sample():
    a = augment.crop_flip_table(100, seed=1, epoch=3)
    assert np.array_equal(a, augment.crop_flip_table(100, seed=1, epoch=3))
    assert not np.array_equal(a, augment.crop_flip_table(100, seed=1, epoch=4))
    assert a[:, :2].min() >= 0 and a[:, :2].max() <= 2 * augment.PAD and set(a[:, 2]) == {0, 1}
    boxes = {augment.resized_crop_box(augment.sample_rng(1, 0, i), 60, 80) for i in range(50)}
    assert len(boxes) > 40
    for top, left, h, w in boxes:
        assert 0 <= top <= 60 - h and 0 <= left <= 80 - w and h * w >= 0.08 * 60 * 80 * 0.9
    assert augment.resized_crop_box(augment.sample_rng(1, 0, 7), 60, 80) == (
        augment.resized_crop_box(augment.sample_rng(1, 0, 7), 60, 80)
    )


def test_centre_crop_box_is_the_centre_of_the_image_scaled_to_the_input_over_0875():
    assert augment.centre_crop_box(256, 256, (224, 224)) == (16, 16, 224, 224)
    top, left, h, w = augment.centre_crop_box(100, 200, (32, 32))
    assert (h, w) == (88, 88) and top == 6 and left == 56


def test_auto_augments_an_image_folder_of_files_and_not_arrays():
    assert augment.effective("auto", "files") == "standard"
    assert augment.effective("auto", "arrays") == "none"
    assert augment.effective("standard", "arrays") == "standard"


# --------------------------------------------------------------------------------------------
# storage, from the runs


def folder_config(*loadings: str, **dataset) -> dict:
    cfg = default_config()
    cfg["datasets"] = {
        "pics": {
            "format": "image-folder",
            "files": [{"url": "file:///nonexistent/pics.zip", "sha256": "0" * 64}],
            **dataset,
        },
        "digits": {},
    }
    cfg["runs"] = [
        {"name": f"r{i}", "dataset": "pics", "workers": 1, "loading": how}
        for i, how in enumerate(loadings)
    ]
    return cfg


def test_an_image_folder_a_run_streams_is_stored_as_files_and_its_slice_says_so():
    resolved = cb.validate(folder_config("stream", "auto"))
    assert resolved["datasets"]["pics"]["storage"] == "files"
    assert cb.preprocess_slice(resolved["datasets"]["pics"])["storage"] == "files"
    assert resolved["datasets"]["digits"]["storage"] == "arrays"
    assert "storage" not in cb.preprocess_slice(resolved["datasets"]["digits"])
    resolved = cb.validate(folder_config("auto", "resident"))
    assert resolved["datasets"]["pics"]["storage"] == "arrays"
    resolved = cb.validate(folder_config("auto", storage="files"))
    assert resolved["datasets"]["pics"]["storage"] == "files"


@pytest.mark.parametrize(
    "cfg, message",
    [
        (folder_config("stream", "resident"), r"datasets\.pics\.storage: runs\[0\] streams"),
        (folder_config("resident", storage="files"), r"runs\[0\]\.loading: resident, but"),
    ],
)
def test_storage_conflicts_are_refused_naming_the_key(cfg, message):
    with pytest.raises(cb.ConfigError, match=message):
        cb.validate(cfg)


def test_only_an_image_folder_can_be_stored_as_files():
    cfg = default_config()
    cfg["datasets"]["digits"]["storage"] = "files"
    with pytest.raises(cb.ConfigError, match=r"datasets\.digits\.storage: files is for image"):
        cb.validate(cfg)


def test_the_train_stage_gets_how_to_read_the_data_outside_its_run_slice():
    resolved = cb.validate({**default_config(), "staging": {"dir": "$TMPDIR/cb"}})
    run = resolved["runs"][0]
    train = cb.train_slice(run)
    assert not {"loading", "loader_workers"} & set(train)
    assert {"augment", "on_bad_file"} <= set(train)
    assert cb.data_settings(run, resolved) == {
        "loading": "auto",
        "loader_workers": None,
        "staging": {"dir": "$TMPDIR/cb"},
    }
    assert cb.stage_params("data_settings", cb.data_settings(run, resolved))
    assert storage.data_files("files") == ["index.npz", "meta.json"]
    assert storage.data_files("extracted") == ["files", "index.npz", "meta.json"]


# --------------------------------------------------------------------------------------------
# streamed arrays: the same batches as resident


def same(a: tuple, b: tuple) -> bool:
    """Two ``(inputs, targets)`` batches are equal, bit for bit."""
    return torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("augment_setting", ["none", "standard"])
def test_streamed_arrays_give_the_resident_batches_and_their_processes_end(
    tmp_path, augment_setting
):
    data = make_dataset(tmp_path / "data", n_train=105)
    run = data_run(augment=augment_setting)
    resident = open_source(data, run, reading("resident"), CPU)
    batches = global_batches(105, 25, 2)
    for workers in (0, 1, 2):
        before = set(children())
        stream = open_source(data, run, reading("stream", workers), CPU)
        for epoch, first, rank in ((0, 0, 0), (1, 2, 1)):
            want = list(resident.epoch_batches(epoch, batches, first, rank, 2))
            got = list(stream.epoch_batches(epoch, batches, first, rank, 2))
            assert len(got) == len(want) == len(batches) - first
            assert all(same(a, b) for a, b in zip(want, got, strict=True))
        want = list(resident.val_batches(1, 2))
        got = list(stream.val_batches(1, 2))
        assert all(same(a, b) for a, b in zip(want, got, strict=True))
        assert len(set(children()) - before) == workers
        half = stream.epoch_batches(2, batches, 0, 0, 1)
        next(half)  # a pass left open, as a preemption leaves it
        stream.close()
        assert set(children()) <= before, "loader processes left behind"
        assert stream.describe()["loader_workers"] == workers
    assert stream.facts["loading"]["decision"] == "stream"


def test_the_source_is_chosen_by_the_loading_decision_and_recorded(tmp_path):
    data = make_dataset(tmp_path / "data")
    source = open_source(data, data_run(), reading("auto"), CPU)
    assert source.describe()["source"] == "resident"
    assert source.facts["loading"]["decision"] == "resident"
    assert "fit in 50%" in source.facts["loading"]["reason"]


def test_a_streamed_run_checks_the_arrays_headers_not_their_bytes(tmp_path):
    data = make_dataset(tmp_path / "data")
    check(data, data_run())
    np.save(data / "val_x.npy", np.zeros((3, 8, 8, 2), np.uint8))
    with pytest.raises(ValueError, match=r"val_x\.npy: uint8 \(3, 8, 8, 2\), expected"):
        check(data, data_run())


# --------------------------------------------------------------------------------------------
# an image folder stored as files


def image_bytes(array: np.ndarray, kind: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, kind)
    return buf.getvalue()


def folder_archive(path: Path, n: int = 36, broken: int = 1, seed: int = 0) -> Path:
    """A zip of ``n`` PNG and JPEG images of two classes and sizes 20..39 (a bright band
    tells the class), with ``broken`` files that are no image."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(n):
            h, w = (int(v) for v in rng.integers(20, 40, 2))
            array = rng.integers(0, 80, (h, w, 3), dtype=np.uint8)
            array[: h // 2 if i % 2 else h, :, 0] = 250
            kind = "PNG" if i % 3 else "JPEG"
            ext = "png" if kind == "PNG" else "jpg"
            archive.writestr(f"top/c{i % 2}/img{i}.{ext}", image_bytes(array, kind))
        for j in range(broken):
            archive.writestr(f"top/c0/broken{j}.jpg", b"no image at all")
    return path


def as_tar_gz(archive: Path) -> Path:
    """The zip's members as a .tar.gz (whose images preprocessing extracts)."""
    import tarfile

    path = archive.with_name("pics.tar.gz")
    with zipfile.ZipFile(archive) as zf, tarfile.open(path, "w:gz") as tar:
        for info in zf.infolist():
            member = tarfile.TarInfo(info.filename)
            member.size = info.file_size
            tar.addfile(member, io.BytesIO(zf.read(info)))
    return path


def extracted(tmp_path: Path, kind: str = "zip", make=folder_archive, **params) -> Path:
    """An image folder stored as files, preprocessed: the zip read in place (``zip``), or the
    same images in a ``.tar.gz``, extracted (``tar.gz``); ``make(path)`` writes the zip."""
    from clusterbench import preprocess
    from clusterbench.download import file_digests

    raw = tmp_path / "raw"
    raw.mkdir(parents=True)
    archive = make(raw / "pics.zip")
    if kind == "tar.gz":
        archive = as_tar_gz(archive)
    digest = file_digests(archive)["sha256"]
    manifest = raw / "MANIFEST.json"
    entry = {"sha256": digest, "path": str(archive), "stored": "in place"}
    manifest.write_text(json.dumps({"dataset": "pics", "files": {archive.name: entry}}))
    settings = {
        "format": "image-folder",
        "files": [archive.name],
        "val_fraction": 0.2,
        "test_fraction": 0.2,
        "split_seed": 0,
        "min_split_size": 5,
        "storage": "files",
        **params,
    }
    preprocess.preprocess("pics", manifest, json.dumps(settings), tmp_path / "data")
    return tmp_path / "data"


def test_preprocess_indexes_a_zip_in_place_and_extracts_a_tar_gz_with_checksums(tmp_path):
    from clusterbench.data.folder import Sources, read_index
    from clusterbench.data.index import copy_path

    data = extracted(tmp_path / "zip", image_size=[16, 16])
    meta = json.loads((data / "meta.json").read_text())
    index = read_index(data, meta)
    assert meta["storage"] == "files" and meta["channels"] == 3 and meta["native_size"] is None
    assert meta["counts"] == {"train": 23, "val": 7, "test": 7}
    assert sorted(set(index.columns["split"].tolist())) == [0, 1, 2]
    assert sorted(p.name for p in data.iterdir()) == ["index.npz", "meta.json"]  # no copy
    assert meta["files"]["index.npz"]["size"] == (data / "index.npz").stat().st_size
    assert meta["source"]["kind"] == "archive" and meta["added"]["copies"] == 0
    sources = Sources(data, index)
    with zipfile.ZipFile(tmp_path / "zip" / "raw" / "pics.zip") as zf:
        for row, name in enumerate(index.names()):
            assert bytes(sources.read(row)) == zf.read(name)  # the member, at its offset
    assert "top/c0/broken0.jpg" in index.names()

    data = extracted(tmp_path / "tgz", kind="tar.gz", image_size=[16, 16])
    meta = json.loads((data / "meta.json").read_text())
    index = read_index(data, meta)
    assert meta["counts"] == {"train": 23, "val": 7, "test": 7}  # the same split
    assert not list(data.glob(".files.partial*")) and meta["source"]["kind"] == "copy"
    files = sorted(p for p in (data / "files").rglob("*") if p.is_file())
    assert len(files) == len(index) == 37 and meta["added"]["copies"] == meta["bytes"]
    for row in range(len(index)):
        copy = data / copy_path(row, index.name(row))
        assert copy.stat().st_size == index.columns["size"][row]
        digest = hashlib.sha256(copy.read_bytes()).digest()
        assert digest == index.columns["sha256"][row].tobytes()


def test_a_streamed_image_folder_is_decoded_at_the_input_size_and_resumes_exactly(tmp_path):
    data = extracted(tmp_path, image_size=[16, 12])
    run = data_run(workers=1, on_bad_file="skip")
    source = open_source(data, run, reading("auto", 2), CPU)
    assert source.input_shape == [3, 16, 12] and source.augment == "standard"
    batches = global_batches(source.train_size, 8, 1)
    whole = list(source.epoch_batches(0, batches, 0, 0, 1))
    rest = list(source.epoch_batches(0, batches, 1, 0, 1))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(whole[1:], rest, strict=True))
    assert whole[0][0].shape[1:] == (3, 16, 12)
    other = list(source.epoch_batches(1, batches, 0, 0, 1))
    assert not torch.equal(whole[0][0], other[0][0])  # another epoch, other crops
    val = list(source.val_batches(0, 1))
    assert sum(len(y) for _, y in val) in (6, 7)  # less the broken file, if it fell in val
    source.close()
    assert source.normalisation["input"] == {"augment": "standard", "on_bad_file": "skip"}


def test_a_bad_image_names_its_file_or_is_skipped_and_counted(tmp_path):
    from clusterbench.data.index import SPLITS, read

    data = extracted(tmp_path, image_size=[16, 16])
    index = read(data / "index.npz")
    where = SPLITS[int(index.columns["split"][index.names().index("top/c0/broken0.jpg")])]
    run = data_run(workers=1, augment="none")
    for setting in ("fail", "skip"):
        source = open_source(data, {**run, "on_bad_file": setting}, reading("stream"), CPU)
        passes = [
            lambda s=source: list(s.epoch_batches(0, global_batches(s.train_size, 8, 1), 0, 0, 1)),
            lambda s=source: list(s.val_batches(0, 1)),
        ]
        if setting == "fail":
            with pytest.raises(DataError, match=r"pics\.zip \(member top/c0/broken0\.jpg\)"):
                for one in passes:
                    one()
            continue
        for one in passes:
            one()
        if where != "test":
            assert len(source.describe()["skipped"]) == 1
    merged = record.merge([record.rank_record(source), {"skipped": {"x": "bad"}}])
    assert merged["skipped_files"] == (2 if where != "test" else 1)


@pytest.mark.parametrize(
    "setting, device, want",
    [
        ("cpu", "cuda", ("cpu", "decode: cpu")),
        ("gpu", "cuda", ("gpu", "decode: gpu")),
        ("auto", "cuda", ("gpu", "auto: the run trains on a GPU")),
        ("auto", "cpu", ("cpu", "auto: the run trains on the CPU")),
    ],
)
def test_decode_auto_is_the_gpu_on_gpus_and_the_cpu_on_the_cpu(setting, device, want):
    from clusterbench.data import device_decode

    assert device_decode.choose(setting, device) == want
    with pytest.raises(ValueError, match="decode: gpu decodes on the run's GPU"):
        device_decode.choose("gpu", "cpu")  # the config check refuses it before any job


def device_source(data: Path, run: dict, monkeypatch) -> object:
    """The ``decode: gpu`` source of ``data``, its device the CPU (the loader processes read
    bytes, the training process decodes and augments each batch)."""
    from clusterbench.data import device_decode

    monkeypatch.setattr(device_decode, "choose", lambda setting, device: ("gpu", "on the CPU"))
    source = open_source(data, run, reading("stream", 2), CPU)
    monkeypatch.undo()
    assert isinstance(source.reader, device_decode.ByteReader) and source.decoder is not None
    return source


def test_decoding_on_the_device_gives_the_loaders_pixels_crops_flips_and_skips(
    tmp_path, monkeypatch
):
    """On the CPU the device path (batches of JPEG bytes decoded by torchvision's batched
    decode_jpeg, PNGs decoded in the loader, cropped, resized and flipped in the training
    process) gives the loader path's batches bit for bit, every epoch's own crops."""
    data = extracted(tmp_path, image_size=[16, 12])
    run = data_run(workers=1, on_bad_file="skip")
    loader = open_source(data, run, reading("stream", 2), CPU)
    device = device_source(data, run, monkeypatch)
    batches = global_batches(loader.train_size, 8, 1)
    for epoch in (0, 1):
        want = list(loader.epoch_batches(epoch, batches, 0, 0, 1))
        got = list(device.epoch_batches(epoch, batches, 0, 0, 1))
        assert all(same(a, b) for a, b in zip(want, got, strict=True))
    want, got = list(loader.val_batches(0, 1)), list(device.val_batches(0, 1))
    assert all(same(a, b) for a, b in zip(want, got, strict=True))
    assert device.describe()["skipped"].keys() == loader.describe()["skipped"].keys()
    assert device.describe()["decode"] == "gpu" and loader.describe()["decode"] == "cpu"
    loader.close()
    device.close()


def test_the_device_decoder_falls_back_per_image_and_names_the_one_that_fails(
    tmp_path, monkeypatch
):
    from clusterbench.data.folder import resize

    data = extracted(tmp_path, image_size=[16, 12])
    source = device_source(data, data_run(workers=1), monkeypatch)
    decoder = source.decoder
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)
    jpeg = image_bytes(pixels, "JPEG")

    def as_tensor(raw: bytes) -> torch.Tensor:
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    whole = (0, 0, 20, 30, False)
    items = [
        (as_tensor(jpeg), whole, 7),
        (as_tensor(jpeg[: len(jpeg) // 2]), whole, 8),  # a truncated JPEG: the batch fails
        (torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), (0, 0, 20, 30, True), 9),
    ]
    x, y, idx, bad = decoder(items, torch.tensor([0, 1, 2]), torch.tensor([4, 5, 6]))
    assert x.shape == (2, 16, 12, 3) and y.tolist() == [0, 2] and idx.tolist() == [4, 6]
    assert [row for row, _ in bad] == [8] and bad[0][1]
    # a GPU resizes in float (CUDA has no 8-bit antialiased resize): within a level of 8-bit
    box = torch.from_numpy(pixels).permute(2, 0, 1)[None].contiguous()
    exact, rounded = resize(box, (16, 12)), resize(box, (16, 12), integer=False)
    assert (exact.int() - rounded.int()).abs().max() <= 1
    source.close()


def test_an_image_folder_without_an_input_size_names_the_key(tmp_path):
    data = extracted(tmp_path)
    with pytest.raises(DataError, match=r"set datasets\.pics\.image_size"):
        check(data, data_run(dataset="pics", workers=1))


def test_evaluation_decodes_the_test_split_as_the_model_was_trained(tmp_path):
    from clusterbench.data.folder import eval_batches

    data = extracted(tmp_path, image_size=[16, 16])
    ckpt = {"arch": {"input_shape": [3, 24, 20]}, "input": {"augment": "standard"}}
    meta, batches = eval_batches(data, "test", 4, {**ckpt, "input": {"on_bad_file": "skip"}})
    got = list(batches)
    assert meta["image_shape"] == [24, 20, 3]
    assert all(x.shape[1:] == (24, 20, 3) and x.dtype == np.uint8 for x, _ in got)
    assert sum(len(y) for _, y in got) + len(batches.skipped) == 7


# --------------------------------------------------------------------------------------------
# run.json's data, and the package's shape


def test_the_record_keeps_rank_0s_facts_every_skip_and_one_staging_entry_per_node():
    ranks = [
        {"source": "stream", "skipped": {"a": "x"}, "staging": stage("n1", "copied", 100)},
        {"source": "stream", "skipped": {"b": "y"}, "staging": stage("n1", "reused", 0)},
        {"source": "stream", "skipped": {}, "staging": stage("n2", "verified", 0)},
    ]
    merged = record.merge(ranks)
    assert merged["skipped_files"] == 2 and merged["source"] == "stream"
    nodes = {n["node"]: n["action"] for n in merged["staging"]["nodes"]}
    assert nodes == {"n1": "copied", "n2": "verified"} and merged["staging"]["bytes"] == 100
    assert record.merge([{}]) == {}


def stage(node: str, action: str, size: int) -> dict:
    return {"node": node, "dir": "/l/pics-1", "bytes": size, "seconds": 1.0, "action": action}


DATA = REPO / "workflow" / "clusterbench" / "data"


def test_no_function_over_80_lines_and_no_import_cycle_in_the_data_package():
    modules = {f"clusterbench.data.{p.stem}": p for p in DATA.glob("*.py")}
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    long = {
        f"{name}.{node.name}": node.end_lineno - node.lineno + 1
        for name, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 80
    }
    assert long == {}
    graph = {
        name: {
            f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for a in node.names
        }
        & set(modules)
        for name, tree in trees.items()
    }

    def reaches(start: str, goal: str, seen: frozenset) -> bool:
        return any(n == goal or reaches(n, goal, seen | {n}) for n in graph[start] - seen)

    assert [name for name in graph if reaches(name, name, frozenset())] == []


@pytest.mark.gpu
def test_streamed_batches_reach_the_gpu_through_pinned_memory_as_resident_ones(tmp_path):
    data = make_dataset(tmp_path / "data", n_train=105)
    run = data_run(augment="standard")
    gpu = torch.device("cuda", 0)
    resident = open_source(data, run, reading("resident"), gpu)
    stream = open_source(data, run, reading("stream", 2), gpu)
    assert stream.make_loader().pin_memory
    batches = global_batches(105, 25, 1)
    want = list(resident.epoch_batches(0, batches, 0, 0, 1))
    got = list(stream.epoch_batches(0, batches, 0, 0, 1))
    assert all(b[0].is_cuda and same(a, b) for a, b in zip(want, got, strict=True))
    stream.close()
