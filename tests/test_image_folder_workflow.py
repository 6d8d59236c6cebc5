"""An image folder streamed through the whole workflow, at tiny sizes: a few dozen PNG and JPEG
files with a corrupt one in a zip, indexed by preprocessing (read where they are, at their
offsets in the zip), decoded per batch by the loader,
evaluated, reported; staged to a node-local directory (copied by the first run, verified and
reused by the second); a corrupt file under on_bad_file: fail stops the workflow naming it;
a staging directory that cannot be written stops the run before training, naming it; how the
data is read is no rerun trigger."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, default_config, pdf_text, snakemake, write_config
from test_data_sources import folder_archive

PROFILE = ("--profile", str(REPO / "profiles" / "local"))


def pics_config(tmp_path: Path, archive: Path, runs: list[dict], staging: str | None) -> dict:
    from clusterbench.download import file_digests

    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["datasets"] = {
        "pics": {
            "format": "image-folder",
            "files": [{"url": archive.as_uri(), "sha256": file_digests(archive)["sha256"]}],
            "image_size": [16, 16],
            "val_fraction": 0.2,
            "test_fraction": 0.2,
            "min_split_size": 5,
        }
    }
    cfg["run_defaults"].update(epochs=2, batch_size=8, workers=1, lr=0.02, loader_workers=1)
    cfg["runs"] = [{"dataset": "pics", "loading": "stream", **run} for run in runs]
    cfg["staging"] = {"dir": staging}
    cfg["report"]["title"] = "pics, streamed"
    return cfg


def split_of(work: Path, member: str) -> str:
    from clusterbench.data.index import SPLITS, read

    index = read(work / "results" / "data" / "pics" / "index.npz")
    return SPLITS[int(index.columns["split"][index.names().index(member)])]


@pytest.mark.slow
def test_an_image_folder_streams_through_the_workflow_staged_and_skipping_a_bad_file(tmp_path):
    work = tmp_path / "work"
    archive = folder_archive(tmp_path / "pics.zip", n=40)
    local = tmp_path / "node-local"
    runs = [
        {"name": "pics-a", "on_bad_file": "skip"},
        {"name": "pics-b", "on_bad_file": "skip", "seed": 2},
    ]
    write_config(work, pics_config(tmp_path, archive, runs, str(local)))
    snakemake(work, *PROFILE)
    res = work / "results"
    meta = json.loads((res / "data" / "pics" / "meta.json").read_text())
    assert meta["storage"] == "files" and not list((res / "data" / "pics").glob("*.npy"))
    # the zip is read where it is: no copy in results/raw, none extracted, none in the cache
    assert sorted(p.name for p in (res / "data" / "pics").iterdir()) == ["index.npz", "meta.json"]
    assert sorted(p.name for p in (res / "raw" / "pics").iterdir()) == ["MANIFEST.json"]
    assert not (tmp_path / "cache" / "pics").exists()
    where = split_of(work, "top/c0/broken0.jpg")
    infos = {
        r["name"]: json.loads((res / "runs" / r["name"] / "run.json").read_text()) for r in runs
    }
    for info in infos.values():
        data = info["data"]
        assert data["storage"] == "files" and data["augment"] == "standard"
        assert data["loading"]["decision"] == "stream" and data["loader_workers"] == 1
        assert data["skipped_files"] == (0 if where == "test" else 1)
        assert data["staging"]["dir"].startswith(str(local))
    actions = sorted(info["data"]["staging"]["nodes"][0]["action"] for info in infos.values())
    assert actions == ["copied", "verified"]  # the second run checked the first run's copy
    # the archive (its members are read at their offsets in the copy), index.npz and meta.json,
    # copied once
    size = archive.stat().st_size + meta["files"]["index.npz"]["size"]
    size += (res / "data" / "pics" / "meta.json").stat().st_size
    assert sorted(i["data"]["staging"]["bytes"] for i in infos.values()) == [0, size]
    evaluation = json.loads((res / "eval" / "pics-a" / "metrics.json").read_text())
    assert evaluation["n"] + evaluation["skipped_files"] == meta["counts"]["test"]
    assert evaluation["skipped_files"] == (1 if where == "test" else 0)
    text = pdf_text(res / "report" / "report.pdf")
    page = text[text.index("How the runs read their data") :]
    assert "copied" in page and "verified" in page
    # the wait for data: the step-time breakdown's share (runs.csv), one definition
    shares = pd.read_csv(res / "report" / "runs.csv").set_index("run")["data_share"]
    assert all(f"{100 * shares[r['name']]:.1f} %" in page for r in runs), page[:3000]
    assert ("1 file" in page) == (where != "test")  # skipped in training

    # how the data is read is no rerun trigger: loader processes, loading, staging changed
    cfg = pics_config(tmp_path, archive, runs, str(tmp_path / "elsewhere"))
    cfg["run_defaults"]["loader_workers"] = 2
    cfg["runs"] = [{**run, "loading": "auto"} for run in cfg["runs"]]
    # with no run streaming it, storage: null would decide arrays: say files (what it was)
    cfg["datasets"]["pics"]["storage"] = "files"
    write_config(work, cfg)
    dry = snakemake(work, *PROFILE, "-n")
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


@pytest.mark.slow
def test_a_bad_file_under_fail_and_an_unwritable_staging_dir_stop_naming_them(tmp_path):
    work = tmp_path / "work"
    archive = folder_archive(tmp_path / "pics.zip", n=40)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    cfg = pics_config(tmp_path, archive, [{"name": "pics-fail", "on_bad_file": "fail"}], None)
    write_config(work, cfg)
    failed = snakemake(work, *PROFILE, check=False)
    assert failed.returncode != 0
    logs = "".join(p.read_text() for p in (work / "results" / "logs").rglob("*.log"))
    assert "top/c0/broken0.jpg" in logs and "is not a readable image" in logs, logs[-3000:]
    assert "Traceback" not in logs

    cfg = pics_config(tmp_path, archive, [{"name": "pics-staged", "on_bad_file": "skip"}], None)
    cfg["staging"] = {"dir": str(blocked / "sub")}
    write_config(work, cfg)
    failed = snakemake(work, *PROFILE, check=False)
    assert failed.returncode != 0
    log = (work / "results" / "logs" / "train" / "pics-staged.log").read_text()
    assert f"staging.dir {blocked / 'sub'} on node" in log and "cannot be written" in log, log
    assert "bytes" in log and "train: epoch" not in log
    assert not (work / "results" / "runs" / "pics-staged" / "model.pt").exists()
