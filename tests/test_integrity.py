"""Files on disk are checked against the checksums recorded when they were written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterbench import integrity


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
