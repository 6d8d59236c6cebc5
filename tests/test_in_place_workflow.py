"""The data a cluster already holds, through the whole workflow (issue 26): a read-only folder of
JPEGs given by ``path`` (bind-mounted read-only in a private mount namespace where the test may,
as root can), the same images as a local zip archive (``file://``), and an ImageNet miniature
(tests/imagenet_mini.py), trained, evaluated and reported in one Snakemake invocation.

Checked: nothing under the folder changes; nothing is copied (``results/raw`` holds the
manifest alone, no cache entry, no extracted image), and what the workflow adds on the shared
file system for each dataset is a few per cent of its bytes; the report's data page says where
each is read from; ImageNet's classes are named by WNID and first word in the per-class
results; a finished workflow has nothing to do, a file added to the folder is noticed at the
next invocation (dry run: what it will redo) and indexed again; a missing path, or an ImageNet
folder without its files, is refused before any job.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, default_config, pdf_text, run_snakemake, snakemake_cmd, write_config
from imagenet_mini import make
from PIL import Image

PROFILE = ("--profile", str(REPO / "profiles" / "local"))
#: The folder's images: enough that the index's fixed few kB are a small share.
IMAGES = 400


def jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    array = rng.integers(0, 200, (32, 32, 3), dtype=np.uint8)
    array[: 8 + seed % 2 * 16] = 250  # the class: where the bright band ends
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def photos(folder: Path) -> Path:
    for i in range(IMAGES):
        (folder / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (folder / f"c{i % 2}" / f"img{i:04d}.jpg").write_bytes(jpeg(i))
    return folder


def snapshot(root: Path) -> dict[str, tuple]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def read_only_mount_works(tmp_path: Path) -> bool:
    """Whether this test may bind-mount a folder read-only in a mount namespace of its own."""
    src, mnt = tmp_path / "probe-src", tmp_path / "probe-mnt"
    src.mkdir()
    mnt.mkdir()
    script = f"mount --bind {src} {mnt} && mount -o remount,bind,ro {mnt} && ! touch {mnt}/x"
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", script], timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Work:
    """The working directory, run with the folder at ``mount``: its read-only bind mount of
    ``source`` in a mount namespace of its own where possible (else the folder itself, its
    permissions taken away)."""

    def __init__(self, root: Path, source: Path, read_only: bool) -> None:
        self.dir, self.source, self.read_only = root / "work", source, read_only
        self.mount = root / "mnt" if read_only else source
        self.mount.mkdir(exist_ok=True)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = snakemake_cmd(self.dir, *PROFILE, *args)
        if self.read_only:
            script = (
                f"mount --bind {self.source} {self.mount} && "
                f'mount -o remount,bind,ro {self.mount} && exec "$@"'
            )
            cmd = ["unshare", "-m", "sh", "-c", script, "sh", *cmd]
        else:
            subprocess.run(["chmod", "-R", "a-w", str(self.source)], check=True)
        return run_snakemake(cmd, REPO, self.dir / "results", check, 1200, None)


def config(work: Work, archive: Path, imagenet: Path) -> dict:
    from clusterbench.download import file_digests

    cfg = default_config()
    cfg["download"]["cache_dir"] = str(work.dir.parent / "cache")
    common = {
        "image_size": [24, 24],
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "min_split_size": 20,
    }
    cfg["datasets"] = {
        "folder": {"format": "image-folder", "path": str(work.mount), **common},
        "zipped": {
            "format": "image-folder",
            "files": [{"url": archive.as_uri(), "sha256": file_digests(archive)["sha256"]}],
            **common,
        },
        "inet": {"format": "imagenet", "path": str(imagenet), "image_size": [24, 24]}
        | {"val_fraction": 0.25, "min_split_size": 4},
    }
    cfg["run_defaults"].update(epochs=1, batch_size=32, workers=1, lr=0.05, loader_workers=1)
    cfg["runs"] = [
        {"name": "on-folder", "dataset": "folder"},
        {"name": "on-zip", "dataset": "zipped", "loading": "stream"},
        {"name": "on-imagenet", "dataset": "inet"},
    ]
    cfg["comm"] = {"enabled": False}
    cfg["report"]["title"] = "data read in place"
    return cfg


def added(work: Work, dataset: str) -> int:
    """The bytes the workflow wrote for ``dataset`` on the shared file system."""
    folders = [work.dir / "results" / kind / dataset for kind in ("raw", "data")]
    folders.append(work.dir.parent / "cache" / dataset)
    return sum(f.stat().st_size for d in folders if d.exists() for f in d.rglob("*") if f.is_file())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("in-place")
    source = photos(root / "photos")
    archive = root / "photos.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # JPEGs: stored, as zip tools store them
        for path in sorted(source.rglob("*.jpg")):
            zf.write(path, f"photos/{path.relative_to(source)}")
    imagenet = make(root / "imagenet").folder
    work = Work(root, source, read_only_mount_works(root))
    write_config(work.dir, config(work, archive, imagenet))
    before = {"photos": snapshot(source), "imagenet": snapshot(imagenet)}
    work.run()
    return work, archive, imagenet, before


@pytest.mark.slow
def test_data_read_in_place_is_not_copied_and_the_source_is_left_as_it_was(finished):
    work, archive, imagenet, before = finished
    assert snapshot(work.source) == before["photos"] and snapshot(imagenet) == before["imagenet"]
    res = work.dir / "results"
    for dataset in ("folder", "zipped", "inet"):
        assert sorted(p.name for p in (res / "raw" / dataset).iterdir()) == ["MANIFEST.json"]
        assert sorted(p.name for p in (res / "data" / dataset).iterdir()) == [
            "index.npz",
            "meta.json",
        ]  # no extracted image, no array
        assert not (work.dir.parent / "cache" / dataset).exists()
    meta = json.loads((res / "data" / "folder" / "meta.json").read_text())
    assert meta["source"] == {**meta["source"], "kind": "folder", "where": str(work.mount)}
    data_bytes = sum(len(v[2]) for v in before["photos"].values())
    for dataset in ("folder", "zipped"):
        share = added(work, dataset) / data_bytes
        assert share < 0.03, (dataset, added(work, dataset), data_bytes)
    text = pdf_text(res / "report" / "report.pdf")
    page = text[text.index("Where the data is read from") :]
    assert "in place: the folder" in page and "in place: the archive" in page, page[:3000]
    assert f"{IMAGES} images" in page and "of the data)" in page


@pytest.mark.slow
def test_imagenets_classes_are_named_by_wnid_and_first_word(finished):
    work = finished[0]
    per_class = (work.dir / "results" / "eval" / "on-imagenet" / "per_class.csv").read_text()
    for name in ("n01440764 tench", "n01443537 goldfish", "n01484850 great white shark"):
        assert name in per_class, per_class
    confusion = (work.dir / "results" / "eval" / "on-imagenet" / "confusion.csv").read_text()
    assert "n01491361 tiger shark" in confusion


@pytest.mark.slow
def test_a_changed_folder_is_noticed_at_the_next_invocation_and_indexed_again(finished):
    work = finished[0]
    assert "Nothing to be done" in work.run("--dry-run").stdout
    subprocess.run(["chmod", "-R", "u+w", str(work.source)], check=True)
    (work.source / "c1" / "added.jpg").write_bytes(jpeg(10_001))
    os.unlink(work.source / "c0" / "img0002.jpg")
    dry = work.run("--dry-run")
    out = dry.stdout + dry.stderr
    said = (
        f"datasets.folder: {work.mount} changed since it was indexed: 1 file(s) added "
        "(c1/added.jpg); 1 file(s) removed (c0/img0002.jpg)"
    )
    assert f"{said}. A real run indexes it again" in out, out
    assert re.search(r"^preprocess_files\s+1$", out, re.MULTILINE), out
    assert re.search(r"^train\s+1$", out, re.MULTILINE), out  # the folder's run alone
    trained = re.findall(r"^\s+output: results/runs/([^/]+)/run\.json", out, re.MULTILINE)
    assert trained == ["on-folder"], out
    real = work.run()
    assert f"{said}. It is indexed again" in real.stdout + real.stderr
    meta = json.loads((work.dir / "results" / "data" / "folder" / "meta.json").read_text())
    assert meta["source"]["images"] == IMAGES
    assert "Nothing to be done" in work.run("--dry-run").stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "where, message",
    [
        ("missing", r"datasets\.folder\.path: .*/missing does not exist"),
        ("a-file", r"datasets\.folder\.path: .*/a-file is not a directory"),
        ("empty", r"datasets\.inet\.path: .*/empty lacks ImageNet's ILSVRC2012_img_train\.tar"),
    ],
)
def test_a_path_that_cannot_be_read_is_refused_before_any_job(tmp_path, where, message):
    from conftest import snakemake

    (tmp_path / "a-file").write_text("")
    (tmp_path / "empty").mkdir()
    cfg = default_config()
    key = "inet" if where == "empty" else "folder"
    fmt = "imagenet" if where == "empty" else "image-folder"
    cfg["datasets"] = {key: {"format": fmt, "path": str(tmp_path / where)}}
    cfg["runs"] = [{"name": "r", "dataset": key, "workers": 1}]
    write_config(tmp_path / "work", cfg)
    proc = snakemake(tmp_path / "work", *PROFILE, "--dry-run", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and re.search(message, out), out
    assert "Traceback" not in out and not (tmp_path / "work" / "results").exists()
    shutil.rmtree(tmp_path / "work")
