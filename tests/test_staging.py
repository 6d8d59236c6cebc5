"""Node-local staging (clusterbench.data.staging) in real processes: one copies, the others find
it; a later run verifies and reuses it; damage is copied again; a directory that cannot be
written or lacks the space is refused naming the path and the bytes; a failed copy stops the
node's other ranks with its message."""

from __future__ import annotations

import errno
import hashlib
import json
import mmap
import multiprocessing
import os
import pwd
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from clusterbench.core import integrity
from clusterbench.data import DataError, staging
from clusterbench.data.staging import MARKER, StagingError, expand_dir, stage
from test_train import make_dataset


def recorded(data: Path) -> Path:
    """``make_dataset``'s data dir with the arrays' records in meta.json (as preprocess writes)."""
    meta = json.loads((data / "meta.json").read_text())
    meta["files"] = {p.name: integrity.record(p) for p in sorted(data.glob("*.npy"))}
    (data / "meta.json").write_text(json.dumps(meta))
    return data


@pytest.fixture
def data(tmp_path) -> Path:
    return recorded(make_dataset(tmp_path / "data", n_train=300))


def test_a_copy_is_made_verified_and_kept_for_a_later_run(data, tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_SCRATCH", str(tmp_path / "local"))
    first = stage(data, "$NODE_SCRATCH/cb", "digits", time.time(), "n1")
    target = first.data_dir
    assert target.parent == tmp_path / "local" / "cb" and target.name.startswith("digits-")
    assert first.facts["action"] == "copied"
    assert first.facts["bytes"] == sum(p.stat().st_size for p in data.iterdir())
    for name in [p.name for p in data.iterdir()]:
        assert (target / name).read_bytes() == (data / name).read_bytes()
    assert json.loads((target / MARKER).read_text())["bytes"] == first.facts["bytes"]

    later = stage(data, "$NODE_SCRATCH/cb", "digits", time.time(), "n1")
    assert later.data_dir == target and later.facts["action"] == "verified"
    assert later.facts["bytes"] == 0

    arr = np.load(target / "train_x.npy")  # damaged in place, same size
    arr[0, 0, 0, 0] ^= 0xFF
    np.save(target / "train_x.npy", arr)
    again = stage(data, "$NODE_SCRATCH/cb", "digits", time.time(), "n1")
    assert again.facts["action"] == "copied"
    assert (target / "train_x.npy").read_bytes() == (data / "train_x.npy").read_bytes()


def test_a_dataset_preprocessed_again_is_staged_anew(data, tmp_path):
    first = stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "seed": 99}))
    second = stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    assert second.data_dir != first.data_dir and second.facts["action"] == "copied"


def test_a_source_file_that_differs_from_its_record_is_not_staged(data, tmp_path):
    (data / "val_y.npy").write_bytes((data / "val_y.npy").read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(StagingError, match=r"val_y\.npy differs from what preprocessing"):
        stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    assert not [p for p in (tmp_path / "local").iterdir() if p.is_dir()]  # no copy left


@pytest.mark.parametrize("size", [1000, 1024, 5000, 7 * 1024])
def test_a_file_of_many_chunks_is_copied_whole_hashed_in_order(tmp_path, monkeypatch, size):
    """The chunked copy (its hash in a helper thread, three buffers in turn) gives the file's
    bytes and its sha256, at chunk multiples and not; one byte changed is refused."""
    monkeypatch.setattr(staging, "CHUNK", 512)
    src = tmp_path / "src.bin"
    src.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    record = integrity.record(src)
    staging.copy_file(src, tmp_path / "dst.bin", record)
    assert (tmp_path / "dst.bin").read_bytes() == src.read_bytes()
    bad = bytearray(src.read_bytes())
    bad[size // 2] ^= 1
    src.write_bytes(bytes(bad))
    with pytest.raises(DataError, match=r"src\.bin differs from what preprocessing"):
        staging.copy_file(src, tmp_path / "dst2.bin", record)


#: A block size for tests: the memory-map granularity (a page), so small files have blocks.
PAGE = mmap.ALLOCATIONGRANULARITY


def test_a_record_with_blocks_has_each_blocks_sha256_for_a_file_over_one_block(tmp_path):
    big, small = tmp_path / "big.bin", tmp_path / "small.bin"
    data = np.random.default_rng(0).integers(0, 256, 2 * PAGE + 100, dtype=np.uint8).tobytes()
    big.write_bytes(data)
    small.write_bytes(data[:PAGE])
    got = integrity.record_with_blocks(big, PAGE)
    pieces = [data[:PAGE], data[PAGE : 2 * PAGE], data[2 * PAGE :]]
    assert got == {
        **integrity.record(big),
        "block": PAGE,
        "blocks": [hashlib.sha256(piece).hexdigest() for piece in pieces],
    }
    assert integrity.record_with_blocks(small, PAGE) == integrity.record(small)  # one block


@pytest.mark.parametrize("kernel_copy", [True, False], ids=["copy_file_range", "read-write"])
def test_a_file_with_blocks_is_copied_and_each_block_of_the_copy_checked(
    tmp_path, monkeypatch, kernel_copy
):
    if not kernel_copy:  # a file system pair copy_file_range refuses: read and written here

        def refuse(*args):
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", refuse)
    src = tmp_path / "src.bin"
    data = np.random.default_rng(1).integers(0, 256, 3 * PAGE + 7, dtype=np.uint8).tobytes()
    src.write_bytes(data)
    record = integrity.record_with_blocks(src, PAGE)
    staging.copy_file(src, tmp_path / "dst.bin", record)
    assert (tmp_path / "dst.bin").read_bytes() == data
    for damage in (
        lambda b: b.__setitem__(2 * PAGE + 1, b[2 * PAGE + 1] ^ 1),  # a byte of block 3
        lambda b: b.extend(b"x"),  # one byte more
    ):
        bad = bytearray(data)
        damage(bad)
        src.write_bytes(bytes(bad))
        with pytest.raises(DataError, match=r"src\.bin differs from what preprocessing"):
            staging.copy_file(src, tmp_path / "dst2.bin", record)


def test_a_staged_file_with_blocks_is_verified_block_by_block(tmp_path):
    folder = tmp_path / "copy"
    folder.mkdir()
    data = np.random.default_rng(2).integers(0, 256, 2 * PAGE + 5, dtype=np.uint8).tobytes()
    (folder / "a.npy").write_bytes(data)
    files = {"a.npy": integrity.record_with_blocks(folder / "a.npy", PAGE)}
    assert staging.verify(folder, files) == []
    bad = bytearray(data)
    bad[PAGE + 3] ^= 1  # block 2, same size
    (folder / "a.npy").write_bytes(bytes(bad))
    assert staging.verify(folder, files) == [f"{folder / 'a.npy'} differs from its record (sha256)"]


def test_a_dataset_recorded_with_blocks_is_staged_verified_and_copied_again_when_damaged(
    data, tmp_path
):
    meta = json.loads((data / "meta.json").read_text())
    meta["files"] = {
        p.name: integrity.record_with_blocks(p, PAGE) for p in sorted(data.glob("*.npy"))
    }
    assert "blocks" in meta["files"]["train_x.npy"]
    (data / "meta.json").write_text(json.dumps(meta))
    first = stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    assert first.facts["action"] == "copied"
    for name in [p.name for p in data.iterdir()]:
        assert (first.data_dir / name).read_bytes() == (data / name).read_bytes()
    assert stage(data, str(tmp_path / "local"), "digits", time.time(), "n1").facts["action"] == (
        "verified"
    )
    copy = first.data_dir / "train_x.npy"
    damaged = bytearray(copy.read_bytes())
    damaged[-1] ^= 1  # the last block's last byte
    copy.write_bytes(bytes(damaged))
    again = stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    assert again.facts["action"] == "copied"
    assert copy.read_bytes() == (data / "train_x.npy").read_bytes()


def test_a_record_whose_blocks_cannot_be_mapped_is_hashed_whole(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"y" * 3000)
    record = {**integrity.record(src), "block": 1000, "blocks": ["?", "?", "?"]}
    assert staging.block_size(record) is None  # not a multiple of the page: the whole sha256
    staging.copy_file(src, tmp_path / "dst.bin", record)
    assert (tmp_path / "dst.bin").read_bytes() == src.read_bytes()
    assert staging.verify(tmp_path, {"dst.bin": record}) == []


@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_directory_that_cannot_be_written_stops_naming_it_and_the_bytes(data, tmp_path, where):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    setting = str(blocked / "sub") if where == "file" else "/proc/clusterbench-staging"
    need = sum(p.stat().st_size for p in data.iterdir())
    with pytest.raises(StagingError) as caught:
        stage(data, setting, "digits", time.time(), "n1")
    assert setting in str(caught.value) and "cannot be written" in str(caught.value)
    assert f"{need:,} bytes" in str(caught.value)


def test_too_little_free_space_stops_naming_the_path_and_the_bytes(data, tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    with pytest.raises(StagingError, match=r"bytes \(.*\) are needed to stage data, 1,000"):
        stage(data, str(tmp_path / "local"), "digits", time.time(), "n1")
    note = next((tmp_path / "local").glob("*.failed.json"))
    assert "are needed" in json.loads(note.read_text())["message"]


def test_an_unset_variable_or_an_unknown_user_is_named_with_the_node():
    with pytest.raises(StagingError, match=r"staging.dir: .*\$NOT_SET_HERE, not set on node n1"):
        expand_dir("$NOT_SET_HERE/cb", "n1")
    # `~nosuchuser/stage` staged into ./~nosuchuser/stage/ before
    with pytest.raises(StagingError, match=r"user 'nosuchuser_cb', who does not exist on node n1"):
        expand_dir("~nosuchuser_cb/stage", "n1")
    assert expand_dir("~root/stage", "n1") == Path(pwd.getpwnam("root").pw_dir) / "stage"


def rank(data: str, base: str, started: float, out: str) -> None:
    """One rank of a node: stage, then write what it did (or its error) to ``out``."""
    try:
        facts = stage(Path(data), base, "digits", started, "n1").facts
    except StagingError as exc:
        facts = {"error": str(exc)}
    Path(out).write_text(json.dumps(facts))


def ranks(data: Path, base: str, n: int, tmp_path: Path) -> list[dict]:
    """``n`` processes staging at once, as the ranks of one node do."""
    started = time.time()
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank-{i}.json" for i in range(n)]
    procs = [ctx.Process(target=rank, args=(str(data), base, started, str(o))) for o in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    return [json.loads(o.read_text()) for o in outs]


def test_one_rank_of_a_node_copies_and_the_others_find_its_copy(data, tmp_path):
    found = ranks(data, str(tmp_path / "local"), 3, tmp_path)
    assert sorted(f["action"] for f in found) == ["copied", "reused", "reused"]
    assert len({f["dir"] for f in found}) == 1


def test_a_failed_copy_stops_the_nodes_other_ranks_with_its_message(data, tmp_path):
    base = tmp_path / "local"
    base.mkdir()
    os.replace(data / "train_x.npy", data / "gone.npy")  # its copy fails
    found = ranks(data, str(base), 2, tmp_path)
    errors = [f["error"] for f in found]
    assert all("train_x.npy" in e for e in errors), errors
    assert sum("another rank of node n1 tried first" in e for e in errors) == 1
