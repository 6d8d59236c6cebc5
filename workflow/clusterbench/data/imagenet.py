"""ImageNet (ILSVRC2012) read where it is (``format: imagenet``,
:mod:`clusterbench.formats.imagenet`): a :class:`~clusterbench.data.scan.Listing` of its
training images (the per-class tars inside ``ILSVRC2012_img_train.tar``, at their offsets; or
a ``train/`` folder of class folders) and its official validation images (the test split:
``ILSVRC2012_img_val.tar``'s members, or a ``val/`` folder, in file-name order, labelled by the
devkit's ground truth; or a ``val/`` folder of class folders), with the classes of the
devkit's ``meta.mat``.

* **Classes:** the leaf synsets of ``data/meta.mat`` (``num_children == 0``: 1,000 of them;
  the others are WordNet's inner nodes), sorted by WNID, each named by its WNID and the first
  of its words (``n01440764 tench``). A training class (a tar or folder named by WNID) that is
  not one of them is refused, and so is a class without training images.
* **Validation labels:** ``data/ILSVRC2012_validation_ground_truth.txt`` holds one
  ILSVRC2012_ID per validation image, in the order of their numbers
  (``ILSVRC2012_val_00000001.JPEG`` is line 1). A file of another length than the images,
  an ID that is no leaf, or an image whose name has no number is refused.
* **A devkit of another layout** (no ``data/meta.mat``, or one without the ``synsets`` fields
  ``ILSVRC2012_ID``, ``WNID``, ``words``, ``num_children``) is refused, naming it.

``scipy.io.loadmat`` reads ``meta.mat`` (scipy comes with scikit-learn): imported here, at
preprocessing, never while the workflow is parsed.
"""

from __future__ import annotations

import io
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from clusterbench.data.scan import (
    JUNK,
    RELINKED,
    Listing,
    ScanError,
    archive_root,
    refuse_links_and_specials,
    tar_error,
    walk,
)
from clusterbench.formats._layout import LayoutError, check_member, class_layout, is_junk
from clusterbench.formats.imagenet import (
    DEVKIT_DIR,
    DEVKIT_TAR,
    GROUND_TRUTH,
    META,
    TRAIN_TAR,
    VAL_TAR,
    missing,
)

_VAL_NAME = re.compile(r"(?:^|/)ILSVRC2012_val_(\d{8})\.JPEG$", re.IGNORECASE)
FIELDS = ("ILSVRC2012_ID", "WNID", "words", "num_children")


@dataclass(frozen=True)
class Devkit:
    """The devkit's classes (leaf WNIDs, sorted; their names) and validation labels."""

    wnids: tuple[str, ...]
    names: tuple[str, ...]
    #: ILSVRC2012_ID -> WNID, of the leaves.
    by_id: dict[int, str]
    #: The ground truth's ILSVRC2012_IDs, line by line.
    ground_truth: tuple[int, ...]
    where: str


def devkit_files(folder: Path) -> tuple[bytes, bytes, str]:
    """The bytes of ``meta.mat`` and the ground truth, from the devkit's ``.tar.gz`` or its
    extracted folder, and what to name it by."""
    if (folder / DEVKIT_TAR).is_file():
        where = str(folder / DEVKIT_TAR)
        found: dict[str, bytes] = {}
        try:
            with tarfile.open(folder / DEVKIT_TAR, "r:*") as archive:
                for member in archive:
                    for want in (META, GROUND_TRUTH):
                        if member.isfile() and (
                            member.name.endswith("/" + want) or member.name == want
                        ):
                            fh = archive.extractfile(member)
                            found[want] = fh.read() if fh is not None else b""
        except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
            raise ScanError(f"{where}: corrupt or truncated archive ({exc})") from None
    else:
        where = str(folder / DEVKIT_DIR)
        found = {
            want: (folder / DEVKIT_DIR / want).read_bytes()
            for want in (META, GROUND_TRUTH)
            if (folder / DEVKIT_DIR / want).is_file()
        }
    lacking = [want for want in (META, GROUND_TRUTH) if want not in found]
    if lacking:
        raise ScanError(
            f"{where} has no {' and no '.join(lacking)}: not the ILSVRC2012 devkit's layout "
            f"({DEVKIT_DIR}/{META}, {DEVKIT_DIR}/{GROUND_TRUTH})"
        )
    return found[META], found[GROUND_TRUTH], where


def read_devkit(folder: Path) -> Devkit:
    """The devkit of ``folder`` (module docstring)."""
    import numpy as np
    import scipy.io

    meta, truth, where = devkit_files(folder)
    try:
        synsets = scipy.io.loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"]
        rows = [{f: synsets[f][i] for f in FIELDS} for i in range(len(synsets))]
    except (KeyError, ValueError, TypeError, IndexError, OSError, NotImplementedError) as exc:
        raise ScanError(
            f"{where}: its {META} holds no 'synsets' with the fields {', '.join(FIELDS)} "
            f"({type(exc).__name__}: {exc}): not the ILSVRC2012 devkit's layout"
        ) from None
    leaves = sorted(
        (str(r["WNID"]), int(r["ILSVRC2012_ID"]), str(r["words"]))
        for r in rows
        if int(np.asarray(r["num_children"]).reshape(-1)[0]) == 0
    )
    if len(leaves) < 2:
        raise ScanError(
            f"{where}: its {META} has {len(leaves)} leaf synset(s): no classes to train"
        )
    try:
        labels = tuple(int(line) for line in truth.decode().split())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ScanError(
            f"{where}: its {GROUND_TRUTH} is not one ILSVRC2012_ID per line ({exc})"
        ) from None
    return Devkit(
        wnids=tuple(w for w, _, _ in leaves),
        names=tuple(f"{w} {words.split(',')[0].strip()}" for w, _, words in leaves),
        by_id={i: w for w, i, _ in leaves},
        ground_truth=labels,
        where=where,
    )


def scan(folder: Path) -> Listing:
    """ImageNet's images in ``folder`` (module docstring): training images (split 0; the
    validation split is carved from them), the official validation images (split 2)."""
    lacking = missing(folder)
    if lacking:
        raise ScanError(f"{folder}: ImageNet's {', '.join(lacking)} is missing")
    kit = read_devkit(folder)
    listing = Listing([], kit.names)
    label = {w: k for k, w in enumerate(kit.wnids)}
    if (folder / TRAIN_TAR).is_file():
        train_tars(folder / TRAIN_TAR, listing, label)
    else:
        train_folder(folder / "train", listing, label)
    counts = [0] * len(kit.wnids)
    for k in listing.label:
        counts[k] += 1
    empty = [kit.names[k] for k, n in enumerate(counts) if n == 0]
    if empty:
        raise ScanError(
            f"{folder}: {len(empty)} class(es) of {kit.where} have no training images "
            f"({', '.join(empty[:3])})"
        )
    if (folder / VAL_TAR).is_file():
        validation_tar(folder / VAL_TAR, listing, kit)
    else:
        validation_folder(folder / "val", listing, kit, label)
    return listing


def train_tars(path: Path, listing: Listing, label: dict[str, int]) -> None:
    """The training images of ``ILSVRC2012_img_train.tar``: per-class tars inside it, each
    member at its offset in the outer file."""
    root = len(listing.roots)
    listing.roots.append(archive_root(path))
    try:
        with tarfile.open(path, "r:") as outer:
            for member in outer:
                if not member.isfile() or is_junk((member.name,)):
                    continue
                wnid = member.name.rsplit("/", 1)[-1].removesuffix(".tar")
                if not member.name.endswith(".tar") or wnid not in label:
                    raise ScanError(
                        f"{path}: {member.name} is not a tar of one of the devkit's classes "
                        "(n01440764.tar, ...)"
                    )
                with tarfile.open(fileobj=outer.extractfile(member), mode="r:") as inner:
                    for image in inner:
                        if not image.isfile() or is_junk(tuple(image.name.split("/"))):
                            continue
                        name = f"{member.name}/{image.name}"
                        check_member(name, image.size, image.size, path.name)
                        listing.add_stored(
                            name,
                            root,
                            image.size,
                            member.offset_data + image.offset_data,
                            label[wnid],
                            0,
                        )
    except LayoutError as exc:
        raise ScanError(str(exc)) from None
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise tar_error(path, exc) from None


def add_folder(listing: Listing, path: Path) -> tuple[int, list[tuple[str, int, int]], list[str]]:
    """A folder read in place as a new root: its files and folders walked (links leading out
    refused), its folders recorded for the change check."""
    if not path.is_dir():
        raise ScanError(f"{path} is not a directory")
    root = len(listing.roots)
    listing.roots.append({"kind": "folder", "path": str(path)})
    walked = walk(path)
    refuse_links_and_specials(walked, path)
    listing.leave_out(JUNK, walked.junk)
    listing.leave_out(RELINKED, walked.relinked)
    for name, mtime in walked.folders:
        listing.dirs["root"].append(root)
        listing.dirs["name"].append(name)
        listing.dirs["mtime"].append(mtime)
    return root, sorted(walked.files), [n for n, _ in walked.folders if n]


def train_folder(path: Path, listing: Listing, label: dict[str, int]) -> None:
    root, files, folders = add_folder(listing, path)
    try:
        layout = class_layout([n for n, _, _ in files], folders, str(path), top=False)
    except LayoutError as exc:
        raise ScanError(str(exc)) from None
    unknown = sorted(set(layout.classes) - set(label))
    if unknown:
        raise ScanError(f"{path}: class folder(s) {unknown[:3]} are not classes of the devkit")
    for k, cls in zip(layout.samples, layout.labels, strict=True):
        name, size, mtime = files[k]
        listing.add_file(name, root, size, mtime, label[layout.classes[cls]], 0)


def number_of(name: str, where: str) -> int:
    match = _VAL_NAME.search(name)
    if not match:
        raise ScanError(
            f"{where}: {name} is not a validation image's name (ILSVRC2012_val_NNNNNNNN.JPEG)"
        )
    return int(match.group(1))


def labelled(names: list[str], kit: Devkit, where: str) -> list[int]:
    """The labels of flat validation images, from the ground truth by their numbers."""
    if len(kit.ground_truth) != len(names):
        raise ScanError(
            f"{kit.where}: its {GROUND_TRUTH} holds {len(kit.ground_truth):,} label(s), "
            f"{where} holds {len(names):,} validation image(s): they must be as many"
        )
    found = []
    for name in names:
        number = number_of(name, where)
        if not 1 <= number <= len(kit.ground_truth):
            raise ScanError(
                f"{where}: {name} has no line in {GROUND_TRUTH} ({len(kit.ground_truth)} lines)"
            )
        wnid = kit.by_id.get(kit.ground_truth[number - 1])
        if wnid is None:
            raise ScanError(
                f"{kit.where}: line {number} of {GROUND_TRUTH} is ILSVRC2012_ID "
                f"{kit.ground_truth[number - 1]}, no leaf class of its {META}"
            )
        found.append(kit.wnids.index(wnid))
    return found


def validation_tar(path: Path, listing: Listing, kit: Devkit) -> None:
    root = len(listing.roots)
    listing.roots.append(archive_root(path))
    try:
        with tarfile.open(path, "r:") as archive:
            members = [m for m in archive if m.isfile() and not is_junk(tuple(m.name.split("/")))]
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise tar_error(path, exc) from None
    members.sort(key=lambda m: number_of(m.name, str(path)))
    labels = labelled([m.name for m in members], kit, str(path))
    for member, k in zip(members, labels, strict=True):
        check_member(member.name, member.size, member.size, path.name)
        listing.add_stored(member.name, root, member.size, member.offset_data, k, 2)


def validation_folder(path: Path, listing: Listing, kit: Devkit, label: dict[str, int]) -> None:
    root, files, folders = add_folder(listing, path)
    if folders:  # sorted into class folders (valprep.sh): the folders give the labels
        try:
            layout = class_layout([n for n, _, _ in files], folders, str(path), top=False)
        except LayoutError as exc:
            raise ScanError(str(exc)) from None
        rows = layout.samples
        labels = []
        for k in layout.labels:
            wnid = layout.classes[k]
            if wnid not in label:
                raise ScanError(f"{path}: class folder {wnid} is not a class of the devkit")
            labels.append(label[wnid])
    else:
        files.sort(key=lambda f: number_of(f[0], str(path)))
        rows = list(range(len(files)))
        labels = labelled([f[0] for f in files], kit, str(path))
    for row, k in zip(rows, labels, strict=True):
        name, size, mtime = files[row]
        listing.add_file(name, root, size, mtime, k, 2)
