"""Files on disk are checked against the checksums recorded when they were written."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from clusterbench.config.datasets import DATASETS
from clusterbench.core import integrity
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
DIGITS_PATH = Path(DIGITS.url.removeprefix("file://"))


def results_state(workdir: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under results/: its size, modification time and sha256. The history store's
    shared-memory index (``history.sqlite-shm``, SQLite's WAL index, no data) is left out: the
    check before any job opens the store when the history job is planned, which SQLite may
    touch it for."""
    return {
        str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns, sha256_of(p))
        for p in sorted((workdir / "results").rglob("*"))
        if p.is_file() and not p.name.endswith(".sqlite-shm")
    }


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_local(workdir: Path, *extra: str, check: bool = True):
    return snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), *extra, check=check)


@pytest.fixture(scope="module")
def mirror():
    """A real HTTP server on loopback serving digits: its download goes into the cache."""
    from test_download import FaultServer

    srv = FaultServer()
    srv.thread.start()
    srv.add("mirror/digits.csv.gz", DIGITS_PATH.read_bytes())
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, mirror) -> Path:
    """A short real run of the whole workflow on digits (one 1-worker run of 1 epoch), digits
    downloaded from a mirror on loopback: its one copy is in the download cache."""
    workdir = tmp_path_factory.mktemp("integrity")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["datasets"]["digits"] = {"mirror": mirror.url("mirror/")}
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
def test_a_missing_or_damaged_cache_file_makes_the_download_run_again(short_run: Path, damage):
    """results/raw holds the manifest alone; the one copy is the cache's, and damage to it is
    found at every invocation and repaired by downloading again."""
    cached = short_run / "cache" / "digits" / DIGITS.name
    manifest = short_run / RAW / "MANIFEST.json"
    assert sorted(p.name for p in (short_run / RAW).iterdir() if "damaged" not in p.name) == [
        "MANIFEST.json"
    ]  # no second copy
    earlier = {p: p.read_bytes() for p in integrity.set_aside_copies(manifest)}
    recorded = manifest.read_bytes()
    said = f"{cached.parent}/{damage(cached)} (checked against {RAW}/MANIFEST.json)"

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
    assert sha256_of(cached) == DIGITS.sha256  # intact again
    assert json.loads(manifest.read_text())["files"][DIGITS.name]["sha256"] == DIGITS.sha256
    after = results_state(short_run)
    for stage in ("data/digits/meta.json", "runs/integrity-1w/model.pt", "report/report.pdf"):
        assert after[f"results/{stage}"][1] > before[f"results/{stage}"][1], stage  # reran
    assert "Nothing to be done" in run_local(short_run, "--dry-run").stdout


@pytest.mark.slow
def test_a_damaged_file_source_read_in_place_is_named_and_nothing_is_lost(
    short_run: Path, tmp_path: Path
):
    """A file:// source is read where it is, not copied: when it is damaged, the workflow
    notices at the next invocation, and the download (which cannot repair a source) stops
    naming it; the results stay as they were."""
    source = tmp_path / "digits.csv.gz"
    source.write_bytes(DIGITS_PATH.read_bytes())
    workdir = copy_of(short_run, tmp_path / "work")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["run_defaults"]["epochs"] = 1
    cfg["runs"] = [{"name": "integrity-1w", "dataset": "digits", "workers": 1}]
    cfg["datasets"]["digits"] = {"urls": {DIGITS.name: source.as_uri()}}
    write_config(workdir, cfg)
    run_local(workdir)  # the new source: downloaded (verified in place) and run
    entry = json.loads((workdir / RAW / "MANIFEST.json").read_text())["files"][DIGITS.name]
    assert entry["path"] == str(source) and entry["stored"] == "in place"
    said = f"{tmp_path}/{corrupt(source)} (checked against {RAW}/MANIFEST.json)"
    model = workdir / "results" / "runs" / "integrity-1w" / "model.pt"
    kept = model.read_bytes()
    failed = run_local(workdir, check=False)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0 and said in out, out
    log = (workdir / "results" / "logs" / "download" / "digits.log").read_text()
    assert f"sha256 mismatch for {source.as_uri()}" in log, log
    assert model.read_bytes() == kept  # nothing after the download ran


# ------------------------------------------------------------ damaged outputs of a run (issue 19)
RUN = "integrity-1w"


def copy_of(workdir: Path, dest: Path) -> Path:
    """A copy of a finished working directory (times kept: as finished)."""
    shutil.copytree(workdir, dest, symlinks=True)
    return dest


def truncate(path: Path) -> None:
    """``head -c 100``: a file cut short, rewritten (a new modification time)."""
    path.write_bytes(path.read_bytes()[:100])


def garble_metrics(path: Path) -> None:
    path.write_text('{"epoch": 1, "loss": garbage')


def not_json(path: Path) -> None:
    path.write_text("this is not JSON\n")


@pytest.mark.slow
def test_the_steps_record_their_outputs_last(short_run: Path):
    for folder, names in (
        (f"runs/{RUN}", integrity.RUN_FILES),
        (f"eval/{RUN}", integrity.EVAL_FILES),
    ):
        record = short_run / "results" / folder / integrity.CHECKSUMS
        files = json.loads(record.read_text())["files"]
        assert sorted(files) == sorted(names)
        assert integrity.problems(record.parent, files) == []
        # written last: no recorded file is newer than the record
        assert all(
            (record.parent / n).stat().st_mtime_ns <= record.stat().st_mtime_ns for n in names
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stage", "name", "damage"),
    [
        ("runs", "model.pt", truncate),
        ("runs", "metrics.jsonl", garble_metrics),
        ("runs", "run.json", not_json),
        ("eval", "metrics.json", not_json),
    ],
    ids=["model.pt truncated", "metrics.jsonl garbled", "run.json not JSON", "eval not JSON"],
)
def test_a_damaged_run_output_stops_the_workflow_before_any_job_deleting_nothing(
    short_run: Path, tmp_path: Path, stage: str, name: str, damage
):
    """Snakemake would plan the steps reading it (the file is newer than their outputs), remove
    their good outputs (results/eval/RUN/, results/report/) and fail on it."""
    workdir = copy_of(short_run, tmp_path / "work")
    path = workdir / "results" / stage / RUN / name
    written = path.stat().st_size
    damage(path)
    said = (
        f"results/{stage}/{RUN}/{name} has {path.stat().st_size} bytes, {written} were written "
        f"(checked against results/{stage}/{RUN}/checksums.json)"
    )
    remedy = f"snakemake --forcerun results/{stage}/{RUN}/{name} <your usual options>"
    before = results_state(workdir)
    for extra in (("--dry-run",), ()):
        proc = run_local(workdir, *extra, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert said in out and f"Make them again with: {remedy}" in out, out
        assert "Traceback" not in out and "Exception" not in out, out
        assert results_state(workdir) == before  # nothing ran, nothing was deleted


@pytest.mark.slow
def test_the_command_named_for_a_damaged_model_makes_it_again(short_run: Path, tmp_path: Path):
    workdir = copy_of(short_run, tmp_path / "work")
    model = workdir / "results" / "runs" / RUN / "model.pt"
    truncate(model)
    stopped = run_local(workdir, check=False)
    assert f"snakemake --forcerun results/runs/{RUN}/model.pt <your usual options>" in (
        stopped.stdout + stopped.stderr
    )
    run_local(workdir, "--forcerun", f"results/runs/{RUN}/model.pt")
    record = workdir / "results" / "runs" / RUN / integrity.CHECKSUMS
    assert integrity.problems(record.parent, json.loads(record.read_text())["files"]) == []
    assert model.stat().st_size > 100
    assert "Nothing to be done" in run_local(workdir, "--dry-run").stdout


@pytest.mark.slow
def test_a_deleted_meta_json_is_noticed_and_the_command_named_makes_it_again(
    short_run: Path, tmp_path: Path
):
    """Snakemake alone says "Nothing to be done" (the arrays are there, the jobs after them
    complete), and the arrays would never be checked again."""
    workdir = copy_of(short_run, tmp_path / "work")
    meta = workdir / "results" / "data" / "digits" / "meta.json"
    meta.unlink()
    before = results_state(workdir)
    marker = "results/data/digits/meta.json"
    for extra in (("--dry-run",), ()):
        proc = run_local(workdir, *extra, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert f"{marker} is missing: train_x.npy, train_y.npy, val_x.npy" in out, out
        assert f"Make it again with: snakemake --forcerun {marker} <your usual options>" in out
        assert "Traceback" not in out and "Exception" not in out, out
        assert results_state(workdir) == before
    run_local(workdir, "--forcerun", marker)
    assert json.loads(meta.read_text())["files"]
    assert "Nothing to be done" in run_local(workdir, "--dry-run").stdout
