"""Image folders read where they are (issue 26), and archives' members checked before anything
is written (issue 28, section 1): real files, the preprocess stage's ``main``, the loader's
reader, the change check and staging; no Snakemake here (tests/test_in_place_workflow.py
runs the workflow).

* a folder given by ``path``: one folder per class, or ``train/``, ``val/`` (``test/``)
  folders; nothing written under it, an index of sizes and modification times written;
* what is left out (operating-system junk, files beside the class folders) and counted; what
  is refused before anything is written, naming the path (no images, a class folder without
  one, an image outside the class folders, a symbolic link leading out, an unreadable folder);
* archives: member names that leave the folder, decompression bombs (a member or an archive
  that inflates beyond reason), images beyond the pixel limit (named, never a traceback),
  16-bit PNGs decoded alike by both readers;
* a folder changed since it was indexed: added, removed, rewritten files (and what the cheap
  check of folders alone leaves to the loader);
* staging from the folder read in place.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tarfile
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from clusterbench import formats, preprocess
from clusterbench.config import EXIT_BAD_SETTINGS
from clusterbench.data import DataError
from clusterbench.data import changes as source_changes
from clusterbench.data import index as images_index
from clusterbench.data.folder import BadFile, FileReader, Sources, read_index
from clusterbench.data.staging import stage
from clusterbench.download import file_digests
from PIL import Image

PARAMS = {
    "format": "image-folder",
    "val_fraction": 0.2,
    "test_fraction": 0.2,
    "split_seed": 0,
    "min_split_size": 2,
    "storage": "files",
}


def image(seed: int, kind: str = "PNG", size=(20, 24), mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    array = rng.integers(0, 255, shape, dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, kind)
    return buf.getvalue()


def make_folder(root: Path, classes=("cat", "dog"), per_class: int = 10, split: str = "") -> Path:
    for k, cls in enumerate(classes):
        folder = root / split / cls if split else root / cls
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            kind = "PNG" if i % 2 else "JPEG"
            (folder / f"{i}.{'png' if i % 2 else 'jpg'}").write_bytes(image(100 * k + i, kind))
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and folder under ``root``: its size, modification time and sha256."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return found


def run_preprocess(tmp_path: Path, manifest: dict, **params) -> tuple[int, Path]:
    """The preprocess stage's main on ``manifest`` (what the download wrote)."""
    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "MANIFEST.json").write_text(json.dumps({"dataset": "pics", **manifest}))
    out = tmp_path / "data"
    settings = {**PARAMS, **params}
    if settings["storage"] is None:  # decoded into arrays: no storage in the slice
        del settings["storage"]
    argv = ["--dataset", "pics", "--manifest", str(raw / "MANIFEST.json")]
    argv += ["--params", json.dumps(settings), "--out-dir", str(out)]
    return preprocess.main(argv), out


def index_folder(tmp_path: Path, folder: Path, **params) -> tuple[int, Path]:
    return run_preprocess(tmp_path, {"path": str(folder), "files": {}}, **params)


def index_archive(tmp_path: Path, archive: Path, **params) -> tuple[int, Path]:
    entry = {"sha256": file_digests(archive)["sha256"], "path": str(archive), "stored": "in place"}
    return run_preprocess(
        tmp_path, {"files": {archive.name: entry}}, files=[archive.name], **params
    )


def meta_of(data: Path) -> dict:
    return json.loads((data / "meta.json").read_text())


# --------------------------------------------------------------------------- folders in place


def test_a_folder_is_indexed_in_place_writing_nothing_under_it(tmp_path, capsys):
    folder = make_folder(tmp_path / "photos")
    (folder / ".DS_Store").write_bytes(b"\0" * 10)
    (folder / "cat" / "._0.jpg").write_bytes(b"apple double")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "README.txt").write_text("about these photos")
    before = snapshot(folder)
    status, data = index_folder(tmp_path, folder)
    assert status == 0, capsys.readouterr().err
    assert snapshot(folder) == before  # nothing written, nothing changed
    assert sorted(p.name for p in data.iterdir()) == ["index.npz", "meta.json"]
    meta = meta_of(data)
    assert meta["class_names"] == ["cat", "dog"] and sum(meta["counts"].values()) == 20
    assert meta["source"]["kind"] == "folder" and meta["source"]["where"] == str(folder)
    left = meta["source"]["left_out"]
    assert left["operating-system file(s)"]["count"] == 3  # .DS_Store, ._0.jpg, the folder
    assert left["file(s) beside the class folders"] == {"count": 1, "example": "README.txt"}
    index = read_index(data, meta)
    assert "sha256" not in index.columns  # read in place: sizes and modification times
    for row, name in enumerate(index.names()):
        st = os.stat(folder / name)
        assert (index.columns["size"][row], index.columns["mtime"][row]) == (
            st.st_size,
            st.st_mtime_ns,
        )
    # the index: a few kB, then tens of bytes per image (test_in_place_workflow: 20,000 images)
    assert (data / "index.npz").stat().st_size < 4096 + 64 * len(index)


def test_train_val_test_folders_give_the_splits_and_val_alone_is_the_test_split(tmp_path):
    three = tmp_path / "three"
    for split, n in (("train", 10), ("val", 4), ("test", 3)):
        make_folder(three, per_class=n, split=split)
    status, data = index_folder(tmp_path / "a", three)
    assert status == 0
    assert meta_of(data)["counts"] == {"train": 20, "val": 8, "test": 6}

    two = tmp_path / "two"
    for split, n in (("train", 10), ("val", 4)):
        make_folder(two, per_class=n, split=split)
    status, data = index_folder(tmp_path / "b", two)
    assert status == 0
    meta = meta_of(data)
    # val/ is the held-out test split; the validation split is carved from train/
    assert meta["counts"] == {"train": 16, "val": 4, "test": 8}
    index = read_index(data, meta)
    assert all(index.name(int(r)).startswith("val/") for r in index.rows("test"))
    assert all(index.name(int(r)).startswith("train/") for r in index.rows("val"))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: None, None),
        (lambda f: (f / "bird").mkdir(), r"class folder bird/ holds no PNG or JPEG image"),
        (
            lambda f: (f / "empty" / "sub").mkdir(parents=True),
            r"class folder empty/ holds no PNG or JPEG image",
        ),
        (lambda f: (f / "loose.png").write_bytes(image(1)), r"loose\.png is not in a class folder"),
        (
            lambda f: (f / "cat" / "escape.jpg").symlink_to("/etc/hostname"),
            r"1 symbolic link\(s\) lead out of the folder \(cat/escape\.jpg -> /etc/hostname\)",
        ),
    ],
    ids=["intact", "empty class", "empty nested", "loose image", "link out"],
)
def test_a_folder_that_cannot_be_read_as_classes_is_refused_before_anything_is_written(
    tmp_path, capsys, damage, message
):
    folder = make_folder(tmp_path / "photos")
    damage(folder)
    status, data = index_folder(tmp_path, folder)
    err = capsys.readouterr().err
    if message is None:
        assert status == 0, err
        return
    assert status == 1 and err.startswith("preprocess: error: "), err
    assert str(folder) in err and __import__("re").search(message, err), err
    assert "Traceback" not in err and not data.exists()


def test_a_link_inside_the_folder_is_followed_and_no_images_is_refused(tmp_path, capsys):
    folder = make_folder(tmp_path / "photos")
    (folder / "dog" / "alias.jpg").symlink_to(folder / "cat" / "0.jpg")
    status, data = index_folder(tmp_path, folder)
    assert status == 0 and "dog/alias.jpg" in read_index(data, meta_of(data)).names()
    empty = tmp_path / "nothing"
    (empty / "cat").mkdir(parents=True)
    (empty / "cat" / "notes.txt").write_text("no image here")
    status, _ = index_folder(tmp_path / "b", empty)
    assert status == 1 and f"{empty}: no PNG or JPEG images" in capsys.readouterr().err


def test_an_unreadable_folder_is_named(tmp_path, monkeypatch, capsys):
    """As root every folder can be read: an unreadable one is made by os.scandir failing."""
    folder = make_folder(tmp_path / "photos")
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("dog"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    status, _ = index_folder(tmp_path, folder)
    assert status == 1
    assert f"{folder}/dog cannot be read (Permission denied)" in capsys.readouterr().err


def test_a_file_that_is_no_image_is_a_sample_on_bad_file_decides(tmp_path):
    folder = make_folder(tmp_path / "photos", per_class=6)
    (folder / "cat" / "notes.txt").write_text("not an image")
    (folder / "dog" / "fake.jpg").write_bytes(b"not a jpeg either")
    status, data = index_folder(tmp_path, folder)
    assert status == 0
    meta = meta_of(data)
    index = read_index(data, meta)
    reader = FileReader(Sources(data, index), index, (16, 16), 3, "none", 0)
    for name, why in (
        ("cat/notes.txt", "not a PNG or JPEG file"),
        ("dog/fake.jpg", "not a readable image"),
    ):
        row = index.names().index(name)
        split = images_index.SPLITS[int(index.columns["split"][row])]
        i = int(np.flatnonzero(index.rows(split) == row)[0])
        _, _, _, bad = reader.read(split, 0, np.asarray([i]))
        assert bad and bad[0][0] == row and why in bad[0][1], bad


# --------------------------------------------------------------------------- archives (issue 28)


def zip_of(path: Path, members: dict[str, bytes], folders=()) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in folders:
            archive.writestr(zipfile.ZipInfo(name), b"")
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def classes_zip(path: Path, extra: dict[str, bytes] | None = None, folders=()) -> Path:
    members = {
        f"{c}/{i}.png": image(10 * k + i) for k, c in enumerate(("cat", "dog")) for i in range(6)
    }
    return zip_of(path, {**members, **(extra or {})}, folders)


def refused_both_ways(tmp_path: Path, archive: Path, pattern: str, capsys) -> None:
    """Stored as files (streamed) and decoded into arrays (resident): the same refusal,
    naming it, before anything is written."""
    import re

    for storage in ("files", None):
        status, data = index_archive(tmp_path / str(storage), archive, storage=storage)
        err = capsys.readouterr().err
        assert status == 1 and re.search(pattern, err), (storage, err)
        assert "Traceback" not in err
        assert not data.exists() or not [p for p in data.rglob("*") if p.is_file()], storage


@pytest.mark.parametrize(
    "member, shown",
    [("../../evil.png", "'../../evil.png'"), ("/tmp/x/abs_evil.png", "'/tmp/x/abs_evil.png'")],
)
def test_member_names_that_leave_the_folder_are_refused_naming_them(
    tmp_path, capsys, member, shown
):
    archive = classes_zip(tmp_path / "pics.zip", {member: image(99)})
    refused_both_ways(
        tmp_path, archive, rf"1 member name\(s\) lead out of the folder \({shown}\)", capsys
    )


def test_os_junk_is_left_out_and_counted_not_a_class(tmp_path, capsys):
    archive = classes_zip(
        tmp_path / "pics.zip",
        {"__MACOSX/cat/._0.png": b"\0\5\26\7 apple", "cat/.DS_Store": b"\0" * 8, "Thumbs.db": b"x"},
        folders=("__MACOSX/", "__MACOSX/cat/"),
    )
    status, data = index_archive(tmp_path, archive)
    assert status == 0, capsys.readouterr().err
    meta = meta_of(data)
    assert meta["class_names"] == ["cat", "dog"]
    assert meta["source"]["left_out"]["operating-system file(s)"]["count"] == 3
    decoded = formats.decode("image-folder", [archive])
    assert decoded.class_names == ("cat", "dog") and len(decoded.y_train) == 12


def test_an_empty_class_folder_in_an_archive_is_refused_naming_it(tmp_path, capsys):
    archive = classes_zip(tmp_path / "pics.zip", folders=("bird/",))
    refused_both_ways(
        tmp_path, archive, r"pics\.zip: class folder bird/ holds no PNG or JPEG", capsys
    )


def test_a_zip_member_that_inflates_like_a_bomb_is_refused_before_anything_is_written(
    tmp_path, capsys
):
    archive = classes_zip(tmp_path / "bomb.zip", {"cat/huge.png": b"\0" * (64 << 20)})
    assert archive.stat().st_size < 1 << 20
    refused_both_ways(
        tmp_path,
        archive,
        r"bomb\.zip: cat/huge\.png would inflate from [\d,]+ to 67,108,864 bytes "
        r".*decompression bomb",
        capsys,
    )


def test_a_tar_gz_that_inflates_like_a_bomb_is_refused_before_anything_is_extracted(
    tmp_path, capsys
):
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [
            *((f"c{k}/{i}.png", image(i)) for k in (0, 1) for i in range(4)),
            ("c0/big.png", b"\0" * (64 << 20)),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    refused_both_ways(
        tmp_path,
        path,
        r"bomb\.tar\.gz: its images would inflate from .* decompression bomb",
        capsys,
    )


def test_extraction_needs_the_space_and_says_so(tmp_path, monkeypatch, capsys):
    import shutil

    path = tmp_path / "pics.tar.gz"
    with (
        zipfile.ZipFile(classes_zip(tmp_path / "pics.zip")) as zf,
        tarfile.open(path, "w:gz") as tar,
    ):
        for info in zf.infolist():
            member = tarfile.TarInfo(info.filename)
            member.size = info.file_size
            tar.addfile(member, io.BytesIO(zf.read(info)))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1000))
    status, data = index_archive(tmp_path, path)
    err = capsys.readouterr().err
    assert (
        status == 1 and "pics.tar.gz: its images take" in err and "1,000 (1000 B) are free" in err
    )
    assert not (data / "files").exists()


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height`` (1-bit grey): a few hundred bytes of
    header and a short, valid start of its pixels: what a decompression bomb looks like before
    it is decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = zlib.compress(b"\0" * (1 + width // 8) * 64)
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def test_an_image_beyond_the_pixel_limit_is_named_never_decoded(tmp_path, capsys):
    archive = classes_zip(tmp_path / "pics.zip", {"cat/bomb.png": huge_png(30000, 30000)})
    status, _ = index_archive(tmp_path / "arrays", archive, storage=None)
    err = capsys.readouterr().err
    assert status == 1, err
    assert "cat/bomb.png is not decoded: 30000 x 30000 = 900,000,000 pixels, more than the" in err
    assert "DecompressionBombError" not in err and "Traceback" not in err
    # streamed: the loader names it as a file it cannot read (on_bad_file decides)
    status, data = index_archive(tmp_path / "files", archive)
    assert status == 0
    index = read_index(data, meta_of(data))
    reader = FileReader(Sources(data, index), index, (16, 16), 3, "none", 0)
    row = index.names().index("cat/bomb.png")
    with pytest.raises(BadFile, match=r"30000 x 30000 = 900,000,000 pixels, more than"):
        reader.decode(row)


def test_a_16_bit_png_is_decoded_alike_streamed_and_resident(tmp_path):
    wide = (np.arange(24 * 20, dtype=np.uint32).reshape(24, 20) * 137 % 65536).astype(np.uint16)
    buf = io.BytesIO()
    Image.fromarray(wide).save(buf, "PNG")
    members = {
        f"{c}/{i}.png": image(10 * k + i, mode="L") for k, c in enumerate("ab") for i in range(4)
    }
    archive = zip_of(tmp_path / "grey.zip", {**members, "a/wide.png": buf.getvalue()})
    resident = formats.decode("image-folder", [archive])
    names = list(members) + ["a/wide.png"]
    want = resident.x_train[names.index("a/wide.png"), ..., 0]
    assert np.array_equal(want, (wide >> 8).astype(np.uint8))  # the high byte, not clipped
    status, data = index_archive(tmp_path, archive)
    assert status == 0
    meta = meta_of(data)
    index = read_index(data, meta)
    reader = FileReader(Sources(data, index), index, (24, 20), meta["channels"], "none", 0)
    got = reader.decode(index.names().index("a/wide.png"))
    assert meta["channels"] == 1 and np.array_equal(got[0].numpy(), want)


# --------------------------------------------------------------------------- changes


def compare(data: Path, check: str) -> source_changes.Changes:
    return source_changes.compare(data / "index.npz", check, limit=1000)


def test_a_changed_folder_is_told_by_files_and_by_folders(tmp_path):
    folder = make_folder(tmp_path / "photos")
    status, data = index_folder(tmp_path, folder)
    assert status == 0
    assert not compare(data, "files") and not compare(data, "folders")
    time.sleep(0.01)
    (folder / "cat" / "new.png").write_bytes(image(7))
    (folder / "dog" / "3.png").unlink()
    (folder / "bird").mkdir()
    (folder / "bird" / "0.png").write_bytes(image(8))
    rewritten = folder / "cat" / "5.png"
    rewritten.write_bytes(image(9) + b"longer")  # in place: its folder's time stays
    for check in ("files", "folders"):
        found = compare(data, check)
        assert found.added == ["bird/0.png", "cat/new.png"] and found.removed == ["dog/3.png"]
    assert compare(data, "files").changed == ["cat/5.png"]
    # cat/ changed (a file added): its files are listed again, the rewritten one among them
    assert compare(data, "folders").changed == ["cat/5.png"]
    (folder / "cat" / "new.png").unlink()  # cat/ changed again, but differently
    os.utime(
        folder / "cat",
        ns=(os.stat(folder / "cat").st_atime_ns, os.stat(data / "index.npz").st_mtime_ns),
    )
    text = compare(data, "files").text()
    assert "1 file(s) added (bird/0.png)" in text and "1 file(s) removed (dog/3.png)" in text


def test_a_file_rewritten_in_place_past_the_folders_check_is_caught_by_the_loader(tmp_path):
    folder = make_folder(tmp_path / "photos")
    status, data = index_folder(tmp_path, folder)
    target = folder / "dog" / "4.jpg"
    stamp = os.stat(folder / "dog").st_mtime_ns
    target.write_bytes(image(77, "JPEG"))  # same name, other bytes: the folder's time stays
    os.utime(folder / "dog", ns=(stamp, stamp))
    assert not compare(data, "folders")  # the documented trade-off of check: folders
    assert compare(data, "files").changed == ["dog/4.jpg"]
    # auto: every file up to the limit (20 images here), the folders above it
    assert source_changes.compare(data / "index.npz", "auto", limit=20).changed == ["dog/4.jpg"]
    found = source_changes.compare(data / "index.npz", "auto", limit=19)
    assert found.compared == "folders" and not found
    index = read_index(data, meta_of(data))
    with pytest.raises(BadFile, match=r"changed since the folder was indexed"):
        Sources(data, index).read(index.names().index("dog/4.jpg"))


# --------------------------------------------------------------------------- staging


def test_staging_copies_from_the_folder_in_place_and_refuses_a_changed_source(tmp_path):
    folder = make_folder(tmp_path / "photos")
    status, data = index_folder(tmp_path, folder)
    first = stage(data, str(tmp_path / "local"), "pics", time.time(), "n1")
    assert first.facts["action"] == "copied"
    meta = meta_of(first.data_dir)
    index = read_index(first.data_dir, meta)
    sources = Sources(first.data_dir, index)
    for row, name in enumerate(index.names()):
        assert bytes(sources.read(row)) == (folder / name).read_bytes()
        assert sources.describe(row).startswith(str(first.data_dir))  # read from the copy
    assert stage(data, str(tmp_path / "local"), "pics", time.time(), "n1").facts["action"] == (
        "verified"
    )
    copy = first.data_dir / "roots" / "0" / "cat" / "1.png"
    copy.write_bytes(copy.read_bytes()[:-1] + b"\0")  # damaged on the node: copied again
    assert stage(data, str(tmp_path / "local"), "pics", time.time(), "n1").facts["action"] == (
        "copied"
    )
    (folder / "cat" / "1.png").write_bytes(b"other")  # the source changed since indexing
    with pytest.raises(DataError, match=r"cat/1\.png changed since it was indexed"):
        stage(data, str(tmp_path / "other"), "pics", time.time(), "n1")


def test_bad_settings_for_the_split_name_the_key(tmp_path, capsys):
    folder = make_folder(tmp_path / "photos", per_class=3)
    status, data = index_folder(tmp_path, folder, min_split_size=5)
    assert status == EXIT_BAD_SETTINGS
    assert (
        "datasets.pics.val_fraction: the val split would hold 1 sample(s)"
        in capsys.readouterr().err
    )
    assert not data.exists()


def test_the_loaders_header_read_gives_pillows_size_or_defers_to_it():
    from clusterbench.formats import _pixels

    rng = np.random.default_rng(3)
    for kind, extra in (("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True})):
        for size in ((500, 375), (7, 13)):
            buf = io.BytesIO()
            array = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(array).save(buf, kind, **extra)
            assert _pixels.dimensions(buf.getvalue()) == size, (kind, extra, size)
    assert _pixels.dimensions(huge_png(30000, 30000)) == (30000, 30000)
    for other in (b"GIF89a...", b"\xff\xd8\xff\xe0\x00", b"", b"not an image"):
        assert _pixels.dimensions(other) is None  # Pillow then reads the header


# --------------------------------------------------------------------------- round 5 (issue 42)


@pytest.mark.parametrize(
    ("folder", "says"),
    [
        ("\u200bcat", r"class folder '\\u200bcat' holds U\+200B \(ZERO WIDTH SPACE\)"),
        ("dog\ufeff", r"class folder 'dog\\ufeff' holds U\+FEFF \(ZERO WIDTH NO-BREAK SPACE\)"),
        ("b\x07ird", r"class folder 'b\\x07ird' holds U\+0007, an invisible or control"),
        ("\u0308owl", r"starts with U\+0308 \(COMBINING DIAERESIS\), a combining mark"),
    ],
)
def test_a_class_folder_with_an_invisible_character_is_refused_naming_it(folder, says):
    """Such class names passed preprocess, training and evaluation, and crashed the report's
    PDF after all of it (a BOM), or were drawn as what they are not."""
    from clusterbench.formats._layout import LayoutError, class_layout

    with pytest.raises(LayoutError, match=says):
        class_layout([f"{folder}/0.png", "ok/1.png"], where="pics.zip")


def test_class_names_are_composed_and_two_spellings_of_one_are_refused(tmp_path, capsys):
    """macOS writes an accent as a letter and a combining accent (NFD): the class is the name
    in NFC, whoever wrote the folder; both spellings side by side are one name twice."""
    from clusterbench.formats._layout import LayoutError, class_layout

    layout = class_layout(["cafe\u0301/0.png", "dog/1.png", "cafe\u0301/2.png"])
    assert layout.classes == ("caf\u00e9", "dog") and layout.labels == [0, 1, 0]
    with pytest.raises(LayoutError, match=r"class folders 'cafe\\u0301' and 'caf\\xe9' are one"):
        class_layout(["caf\u00e9/0.png", "cafe\u0301/1.png"], where="pics.zip")
    folder = make_folder(tmp_path / "photos", classes=("cafe\u0301", "\u200bdog"), per_class=4)
    status, data = index_folder(tmp_path, folder)
    err = capsys.readouterr().err
    assert status == 1 and f"{folder}: class folder '\\u200bdog' holds U+200B" in err, err
    assert "Traceback" not in err and not data.exists()
    (folder / "\u200bdog").rename(folder / "dog")
    status, data = index_folder(tmp_path, folder)
    assert status == 0 and meta_of(data)["class_names"] == ["caf\u00e9", "dog"]


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_member_listed_twice_is_taken_once_its_last_copy_with_a_warning(tmp_path, kind, caplog):
    """A zip or tar holding one name twice (an archive appended to) was indexed twice: 13
    images for 12; the tar then failed with a message that said not which copy."""
    import warnings

    members = {
        f"{c}/{i}.png": image(10 * k + i) for k, c in enumerate(("cat", "dog")) for i in range(6)
    }
    again = image(999)
    path = tmp_path / f"pics.{kind}"
    if kind == "zip":
        with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
            warnings.simplefilter("ignore")  # zipfile's own "Duplicate name" warning
            for name, data in [*members.items(), ("./dog/2.png", again)]:
                archive.writestr(name, data)
    else:
        with tarfile.open(path, "w") as archive:
            for name, data in [*members.items(), ("./dog/2.png", again)]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    for storage in ("files", None):
        caplog.clear()
        status, data = index_archive(tmp_path / str(storage), path, storage=storage)
        assert status == 0
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any(
            f"pics.{kind}: 1 member name(s) appear more than once (./dog/2.png): the last copy "
            "of each is taken" in line
            for line in said
        ), said
        meta = meta_of(data)
        assert sum(meta["counts"].values()) == 12, (storage, meta["counts"])
    data = tmp_path / "files" / "data"
    index = read_index(data, meta_of(data))
    names = index.names()
    assert len(names) == 12 and names.count("./dog/2.png") == 1 and "dog/2.png" not in names
    assert bytes(Sources(data, index).read(names.index("./dog/2.png"))) == again


def test_a_path_through_a_loop_of_links_or_to_nothing_is_said_as_such(tmp_path):
    """A `path:` that is a symbolic-link loop was said to "not exist"."""
    from clusterbench.pipeline.checks import folder_problem

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "self").symlink_to(tmp_path / "self")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    loop = "leads through a loop of symbolic links"
    for path, says in (
        ("a", loop),
        ("self", loop),
        ("a/photos", loop),
        ("gone", f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist"),
        ("nowhere", "does not exist"),
    ):
        said = folder_problem("pics", tmp_path / path, "image-folder")
        assert said.startswith(f"datasets.pics.path: {tmp_path / path} {says}"), said


def test_class_folders_that_link_to_each_other_stay_two_classes(tmp_path):
    """cat/ and dog/ each holding a link to the other were walked as one class: the link was
    followed before the real folder, whose images all went under the link's class."""
    folder = make_folder(tmp_path / "photos", per_class=5)
    (folder / "cat" / "dogs").symlink_to(folder / "dog")
    (folder / "dog" / "cats").symlink_to(folder / "cat")
    status, data = index_folder(tmp_path, folder)
    assert status == 0
    meta = meta_of(data)
    assert meta["class_names"] == ["cat", "dog"] and sum(meta["counts"].values()) == 10
    assert (
        meta["source"]["left_out"]["link(s) to a folder listed already under its own name"]["count"]
        == 2
    )
    assert not compare(data, "files") and not compare(data, "folders")
    (folder / "dog" / "5.png").write_bytes(image(55))  # dog/ changed: its link is no new folder
    assert compare(data, "folders").added == ["dog/5.png"]


def animated_gif(frames: int = 3) -> bytes:
    pictures = [Image.new("RGB", (20, 24), (40 * i, 0, 0)) for i in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, "GIF", save_all=True, append_images=pictures[1:])
    return buf.getvalue()


def test_an_animated_gif_named_png_is_refused_alike_by_both_readers_saying_so(tmp_path):
    """It was skipped with the reason "too many values to unpack (expected 3)" (torchvision
    decodes every frame); Pillow took its first frame."""
    from clusterbench.formats._pixels import PixelError, open_checked

    with pytest.raises(PixelError, match=r"an animated image of 3 frames \(a GIF\?\)"):
        open_checked(animated_gif())
    folder = make_folder(tmp_path / "photos", per_class=6)
    (folder / "dog" / "moving.png").write_bytes(animated_gif())
    status, data = index_folder(tmp_path, folder)
    assert status == 0
    index = read_index(data, meta_of(data))
    reader = FileReader(Sources(data, index), index, (16, 16), 3, "none", 0)
    row = index.names().index("dog/moving.png")
    split = images_index.SPLITS[int(index.columns["split"][row])]
    i = int(np.flatnonzero(index.rows(split) == row)[0])
    _, _, _, bad = reader.read(split, 0, np.asarray([i]))
    assert bad == [(row, "an animated image of 3 frames (a GIF?), not a still PNG or JPEG")]


def test_a_compressed_tar_under_a_tar_name_is_said_to_be_compressed(tmp_path, capsys):
    """A gzip-compressed ILSVRC2012_img_train.tar was "corrupt or truncated (invalid
    header)"."""
    import gzip

    from clusterbench.data import imagenet
    from clusterbench.data.scan import Listing, ScanError

    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as archive:
        archive.add(make_folder(tmp_path / "photos", per_class=3), arcname="photos")
    train = tmp_path / "ILSVRC2012_img_train.tar"
    train.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(ScanError, match=r"ILSVRC2012_img_train\.tar: gzip-compressed, not a"):
        imagenet.train_tars(train, Listing([], ()), {})
    status, _ = index_archive(tmp_path, train.rename(tmp_path / "pics.tar"))
    err = capsys.readouterr().err
    assert status == 1 and "pics.tar: gzip-compressed, not a plain tar" in err, err
    assert "`mv pics.tar pics.tar.z && gzip -dc pics.tar.z > pics.tar`" in err


def index_with_digests(tmp_path: Path, manifest: dict, **params) -> Path:
    """:func:`run_preprocess` as the workflow runs it for ``check: content``."""
    raw, out = tmp_path / "raw", tmp_path / "results" / "data" / "pics"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "MANIFEST.json").write_text(json.dumps({"dataset": "pics", **manifest}))
    argv = ["--dataset", "pics", "--manifest", str(raw / "MANIFEST.json"), "--check", "content"]
    argv += ["--params", json.dumps({**PARAMS, **params}), "--out-dir", str(out)]
    assert preprocess.main(argv) == 0
    return out


def swap_keeping_times(a: Path, b: Path) -> None:
    """Swap the bytes of two files of one size in place, their times and their folders' put
    back: what a size-and-time check cannot see."""
    stamps = {p: os.stat(p) for p in (a, b, a.parent, b.parent)}
    data_a, data_b = a.read_bytes(), b.read_bytes()
    assert len(data_a) == len(data_b) and data_a != data_b
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    for path, st in stamps.items():
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_swapped_files_of_one_size_with_their_times_put_back_are_caught_by_content(
    tmp_path, monkeypatch
):
    """Issue 42: two files of one size swapped, their times restored, went unnoticed (the
    documented size-and-time check). check: content reads every image against the sha256 the
    index recorded; an index made without them is made again first, saying why."""
    from clusterbench.pipeline.checks import Checks
    from test_pipeline import FakeAdapter

    folder = make_folder(tmp_path / "photos", per_class=6)
    a, b = folder / "cat" / "1.png", folder / "dog" / "3.png"
    size = max(len(a.read_bytes()), len(b.read_bytes()))
    for path in (a, b):  # of one size: the shorter padded (after IEND, which PNG readers skip)
        path.write_bytes(path.read_bytes().ljust(size, b"\0"))
    monkeypatch.chdir(tmp_path)
    source = {"path": str(folder), "format": "image-folder", "check": "content"}

    def warned() -> list[str]:
        adapter = FakeAdapter(executor="dryrun")
        Checks(["a"], adapter, None, {"pics": "files"}, {"pics": source}).in_place("pics")
        return adapter.warnings

    status, _ = run_preprocess(tmp_path, {"path": str(folder), "files": {}})  # without digests
    (tmp_path / "results" / "data").mkdir(parents=True)
    (tmp_path / "data").rename(tmp_path / "results" / "data" / "pics")
    assert status == 0 and "check: content compares each image's sha256" in warned()[0]

    data = index_with_digests(tmp_path, {"path": str(folder), "files": {}})
    assert warned() == []
    swap_keeping_times(a, b)
    for check in ("files", "folders"):
        assert not compare(data, check), check  # said in docs/data.md: they cannot see it
    found = compare(data, "content")
    assert found.content == ["cat/1.png", "dog/3.png"] and found.compared == "content"
    assert warned() == [
        f"datasets.pics: {folder} changed since it was indexed: 2 file(s) changed in content "
        "(sha256), of the same size and modification time (cat/1.png, dog/3.png). A real run "
        "indexes it again (the preprocess step) and runs what follows; this run changes nothing"
    ]


def test_a_byte_changed_inside_an_archive_with_its_time_put_back_is_caught_by_content(
    tmp_path,
):
    archive = tmp_path / "pics.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(make_folder(tmp_path / "photos", per_class=4), arcname="photos")
    entry = {"sha256": file_digests(archive)["sha256"], "path": str(archive), "stored": "in place"}
    data = index_with_digests(tmp_path, {"files": {archive.name: entry}}, files=[archive.name])
    index = images_index.read(data / "index.npz")
    row = index.names().index("photos/dog/3.png")
    st = os.stat(archive)
    with open(archive, "r+b") as fh:  # one byte of one member, in place
        fh.seek(int(index.columns["offset"][row]) + 40)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not compare(data, "files")
    assert compare(data, "content").content == ["photos/dog/3.png"]
