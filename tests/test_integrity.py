"""Files on disk are checked against the checksums recorded when they were written."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from clusterbench import integrity
from clusterbench.datasets import DATASETS
from conftest import REPO, default_config, snakemake, write_config


def written(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, data in (("a.npy", b"a" * 100), ("b.npy", b"b" * 10)):
        (folder / name).write_bytes(data)
    marker = folder / "meta.json"
    files = {n: integrity.record(folder / n) for n in ("a.npy", "b.npy")}
    marker.write_text(json.dumps({"files": files}))
    return marker


def test_intact_files_pass_and_each_kind_of_damage_is_named(tmp_path):
    marker = written(tmp_path / "d")
    integrity.check(marker, "files", "REMEDY")
    (tmp_path / "d" / "a.npy").write_bytes(b"a" * 99)  # truncated
    (tmp_path / "d" / "b.npy").write_bytes(b"B" * 10)  # same size, other bytes
    with pytest.raises(integrity.DamagedFile) as err:
        integrity.check(marker, "files", "REMEDY")
    msg = str(err.value)
    assert "a.npy has 99 bytes, 100 were written" in msg
    assert "b.npy differs from what was written (sha256)" in msg
    assert msg.endswith("Make it again with: REMEDY")
    (tmp_path / "d" / "b.npy").unlink()
    with pytest.raises(integrity.DamagedFile, match=r"b\.npy is missing"):
        integrity.check(marker, "files", "REMEDY", prefix="b")


def test_no_marker_or_no_record_means_nothing_to_check(tmp_path):
    integrity.check(tmp_path / "none.json", "files", "REMEDY")
    (tmp_path / "old.json").write_text(json.dumps({"dataset": "digits"}))
    integrity.check(tmp_path / "old.json", "files", "REMEDY")


def test_forcerun_command_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = integrity.forcerun_command(tmp_path / "results" / "data" / "d" / "meta.json")
    assert cmd == "snakemake --forcerun results/data/d/meta.json"


# --------------------------------------------------------------------------- digest cache


def test_the_digest_cache_reads_an_unchanged_file_once_and_a_rewritten_one_again(
    tmp_path, monkeypatch
):
    reads = []
    real = integrity.sha256_of
    monkeypatch.setattr(integrity, "sha256_of", lambda path: reads.append(path) or real(path))
    path = tmp_path / "a.npy"
    path.write_bytes(b"a" * 100)
    store = tmp_path / ".snakemake" / "clusterbench" / "checksums.json"
    cache = integrity.DigestCache(store)
    assert cache.sha256(path) == real(path) and cache.sha256(path) == real(path)
    assert len(reads) == 1
    cache.save()
    again = integrity.DigestCache(store)  # the next invocation
    assert again.sha256(path) == real(path) and len(reads) == 1

    # rewritten with the same size and its modification time set back: the change time
    # (which nothing sets back) tells, and the damage is found
    stat = path.stat()
    path.write_bytes(b"b" * 100)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert again.sha256(path) == real(path) != cache.entries[str(path)][-1]
    assert len(reads) == 2
    files = {"a.npy": {"size": 100, "sha256": hashlib.sha256(b"a" * 100).hexdigest()}}
    assert integrity.problems(tmp_path, files, again) == [
        f"{path} differs from what was written (sha256)"
    ]


def test_the_digest_cache_drops_files_gone_and_ignores_a_damaged_cache(tmp_path):
    store = tmp_path / "checksums.json"
    cache = integrity.DigestCache(store)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(name.encode())
        cache.sha256(tmp_path / name)
    (tmp_path / "b").unlink()
    cache.save()
    assert set(json.loads(store.read_text())) == {str(tmp_path / "a")}
    store.write_text("{not json")
    assert integrity.DigestCache(store).entries == {}
    assert integrity.DigestCache(tmp_path / "none.json").entries == {}


def test_a_damaged_marker_is_a_problem_only_when_strict(tmp_path):
    marker = tmp_path / "MANIFEST.json"
    assert integrity.recorded_problems(marker, "files", strict=True) == []  # none yet
    marker.write_text("{truncated")
    assert integrity.recorded_problems(marker, "files") == []
    assert integrity.recorded_problems(marker, "files", strict=True) == [
        f"{marker} records no 'files' (not the JSON the stage wrote)"
    ]


# --------------------------------------------------------------------------- set aside


def test_set_aside_renames_the_marker_and_never_overwrites_an_earlier_copy(tmp_path):
    marker = tmp_path / "MANIFEST.json"
    assert integrity.set_aside_copies(marker) == []
    for number, aside in enumerate(("MANIFEST.json.damaged", "MANIFEST.json.damaged.2"), 1):
        marker.write_text(f"version {number}")
        assert integrity.next_aside(marker) == tmp_path / aside
        assert integrity.set_aside(marker) == tmp_path / aside
        assert not marker.exists()
    (tmp_path / "MANIFEST.json.damaged.10").write_text("version 10")
    (tmp_path / "MANIFEST.json.damaged.x").write_text("not a copy")
    assert [p.name for p in integrity.set_aside_copies(marker)] == [
        "MANIFEST.json.damaged",
        "MANIFEST.json.damaged.2",
        "MANIFEST.json.damaged.10",
    ]
    assert [p.read_text() for p in integrity.set_aside_copies(marker)] == [
        "version 1",
        "version 2",
        "version 10",
    ]


def test_set_aside_without_hard_links_renames(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    marker = tmp_path / "MANIFEST.json"
    (tmp_path / "MANIFEST.json.damaged").write_text("earlier")
    marker.write_text("now")
    assert integrity.set_aside(marker) == tmp_path / "MANIFEST.json.damaged.2"
    assert (tmp_path / "MANIFEST.json.damaged").read_text() == "earlier"
    assert (tmp_path / "MANIFEST.json.damaged.2").read_text() == "now"


# --------------------------------------------------------------------------- the workflow

RAW = "results/raw/digits"
DIGITS = DATASETS["digits"].files[0]


def results_state(workdir: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under results/: its size, modification time and sha256."""
    return {
        str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns, sha256_of(p))
        for p in sorted((workdir / "results").rglob("*"))
        if p.is_file()
    }


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_local(workdir: Path, *extra: str, check: bool = True):
    return snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), *extra, check=check)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A short real run of the whole workflow on digits (one 1-worker run of 1 epoch)."""
    workdir = tmp_path_factory.mktemp("integrity")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["run_defaults"]["epochs"] = 1
    cfg["runs"] = [{"name": "integrity-1w", "dataset": "digits", "workers": 1}]
    write_config(workdir, cfg)
    run_local(workdir)
    return workdir


def delete(path: Path) -> str:
    path.unlink()
    return f"{path.name} is missing"


def corrupt(path: Path) -> str:
    """One byte changed: the same size, and the modification time set back."""
    stat, data = path.stat(), bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return f"{path.name} differs from what was written (sha256)"


@pytest.mark.slow
@pytest.mark.parametrize("damage", [delete, corrupt], ids=["deleted", "corrupted"])
def test_a_missing_or_damaged_raw_file_makes_the_download_run_again(short_run: Path, damage):
    raw_file = short_run / RAW / DIGITS.name
    manifest = short_run / RAW / "MANIFEST.json"
    earlier = {p: p.read_bytes() for p in integrity.set_aside_copies(manifest)}
    recorded = manifest.read_bytes()
    said = f"{RAW}/{damage(raw_file)} (checked against {RAW}/MANIFEST.json)"

    # a dry run changes nothing on disk, says what a real run will do, and plans the download
    before = results_state(short_run)
    dry = run_local(short_run, "--dry-run")
    out = dry.stdout + dry.stderr
    assert f"{said}: a real run sets {RAW}/MANIFEST.json aside" in out, out
    assert re.search(r"^rule download:$", out, re.MULTILINE), out
    assert re.search(r"^rule report:$", out, re.MULTILINE), out  # and what follows it
    assert results_state(short_run) == before

    # a real run sets the manifest aside, downloads again and finishes
    real = run_local(short_run)
    out = real.stdout + real.stderr
    aside = [p for p in integrity.set_aside_copies(manifest) if p not in earlier]
    assert len(aside) == 1, aside
    assert f"{said}: set {RAW}/MANIFEST.json aside as {RAW}/{aside[0].name}" in out, out
    assert aside[0].read_bytes() == recorded  # kept, as it was
    assert all(p.read_bytes() == data for p, data in earlier.items())  # earlier ones too
    assert sha256_of(raw_file) == DIGITS.sha256  # intact again
    assert json.loads(manifest.read_text())["files"][DIGITS.name]["sha256"] == DIGITS.sha256
    after = results_state(short_run)
    for stage in ("data/digits/meta.json", "runs/integrity-1w/model.pt", "report/report.pdf"):
        assert after[f"results/{stage}"][1] > before[f"results/{stage}"][1], stage  # reran
    assert "Nothing to be done" in run_local(short_run, "--dry-run").stdout
