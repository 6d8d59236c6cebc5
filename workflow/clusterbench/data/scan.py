"""What an image folder holds, read where it is: a folder's files, or a ``.zip``'s or
``.tar``'s members at their offsets (nothing extracted), as a :class:`Listing` of images,
their classes, and what tells later that the source changed.

* **A folder** (``datasets.<name>.path``): one folder per class, or ``train/``, ``val/``
  (and ``test/``) folders each with one folder per class (:func:`scan_folder`). Every file's
  size and modification time are taken (one ``lstat`` each: no file is opened), and every
  folder's modification time. A symbolic link is followed where it stays inside the folder
  and refused where it leads out of it.
* **An archive read in place** (:func:`scan_zip`, :func:`scan_tar`): its members' names,
  sizes and offsets (a zip's central directory and local headers; a tar's headers), without
  reading their data.
* **Refused before anything is written**, naming the member: a name that leaves the folder,
  an encrypted zip member, a member larger than :data:`MAX_MEMBER_BYTES` (no PNG or JPEG
  within the pixel limit is) or that would inflate more than :data:`MAX_RATIO` times (a
  decompression bomb).

The member rules (junk, classes, empty class folders) are :mod:`clusterbench.formats._layout`'s.
The standard library only: the workflow's check of a folder (while the Snakefile is parsed)
walks a changed folder with :func:`walk`.
"""

from __future__ import annotations

import os
import stat
import struct
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.formats._layout import LayoutError, check_member, class_layout, is_junk

SPLIT_FOLDERS = ("train", "val", "test")
#: Why files were left out (:attr:`Listing.left_out`).
JUNK = "operating-system file(s)"
LOOSE = "file(s) beside the class folders"
LINKS = "link(s) or special member(s)"
RELINKED = "link(s) to a folder listed already under its own name"
EARLIER = "earlier cop(ies) of a member listed again (the last is taken)"


class ScanError(LayoutError):
    """The source is not an image folder that can be read; the message names the path."""


@dataclass
class Listing:
    """Images found: per image its root (index into ``roots``), name, size, modification
    time (ns, folders), offset and stored length (archives), zip method, label and split
    (``-1``: to be carved by the seeded split), in the order the index keeps them."""

    roots: list[dict[str, Any]]
    classes: tuple[str, ...]
    names: list[str] = field(default_factory=list)
    root: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    mtime: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    length: list[int] = field(default_factory=list)
    method: list[int] = field(default_factory=list)
    label: list[int] = field(default_factory=list)
    split: list[int] = field(default_factory=list)
    #: Folder roots' folders: {"root", "name", "mtime"} lists (the change check).
    dirs: dict[str, list[Any]] = field(
        default_factory=lambda: {"root": [], "name": [], "mtime": []}
    )
    #: What was left out: reason -> {"count", "example"} (:data:`LEFT_OUT` names the reasons).
    left_out: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: sha256 of each image (an extracted copy's), else empty.
    sha256: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.names)

    def leave_out(self, reason: str, names: list[str], count: int | None = None) -> None:
        """Count ``names`` (or ``count`` of them) as left out for ``reason``."""
        n = len(names) if count is None else count
        if n:
            entry = self.left_out.setdefault(
                reason, {"count": 0, "example": names[0] if names else ""}
            )
            entry["count"] += n

    def left_out_text(self) -> str:
        """What was left out, in a sentence ('' for nothing)."""
        said = [
            f"{e['count']:,} {reason}" + (f" (e.g. {e['example']})" if e["example"] else "")
            for reason, e in self.left_out.items()
        ]
        return ("left out " + ", ".join(said)) if said else ""

    def left_layout(self, layout: Any, prefix: str = "") -> None:
        self.leave_out(JUNK, [prefix + n for n in layout.junk])
        self.leave_out(LOOSE, [prefix + n for n in layout.loose])
        self.leave_out(EARLIER, [prefix + n for n in layout.earlier])

    def add(self, **row: Any) -> None:
        for key in ("names", "root", "size", "mtime", "offset", "length", "method", "label"):
            getattr(self, key).append(row[key])
        self.split.append(row.get("split", -1))

    def add_file(
        self, name: str, root: int, size: int, mtime: int, label: int, split: int = -1
    ) -> None:
        """An image that is a file of its own, read whole where it is."""
        self.add(
            names=name,
            root=root,
            size=size,
            mtime=mtime,
            offset=-1,
            length=size,
            method=0,
            label=label,
            split=split,
        )

    def add_stored(
        self, name: str, root: int, size: int, offset: int, label: int, split: int = -1
    ) -> None:
        """An image stored uncompressed inside an archive, at ``offset`` of it."""
        self.add(
            names=name,
            root=root,
            size=size,
            mtime=0,
            offset=offset,
            length=size,
            method=0,
            label=label,
            split=split,
        )


# --------------------------------------------------------------------------- archives


def zip_data_offset(fh: Any, info: zipfile.ZipInfo, where: str) -> int:
    """Where a zip member's stored bytes start: after its local header."""
    fh.seek(info.header_offset)
    head = fh.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise ScanError(f"{where}: the local header of {info.filename} is damaged")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len


def scan_zip(path: Path, root: int = 0) -> Listing:
    """A zip's images read in place (module docstring)."""
    where = path.name
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as fh:
            infos = archive.infolist()
            files = [i for i in infos if not i.is_dir()]
            layout = class_layout(
                [i.filename for i in files], [i.filename for i in infos if i.is_dir()], where
            )
            listing = Listing([archive_root(path)], layout.classes)
            for k, label in zip(layout.samples, layout.labels, strict=True):
                info = files[k]
                if info.flag_bits & 0x1:
                    raise ScanError(f"{where}: {info.filename} is encrypted: not readable")
                check_member(info.filename, info.file_size, info.compress_size, where)
                stored = info.compress_type == zipfile.ZIP_STORED
                listing.add(
                    names=info.filename,
                    root=root,
                    size=info.file_size,
                    mtime=0,
                    offset=zip_data_offset(fh, info, where),
                    length=info.compress_size,
                    method=0 if stored else info.compress_type,
                    label=label,
                )
    except LayoutError as exc:
        raise ScanError(str(exc)) from None
    except (OSError, EOFError, zipfile.BadZipFile, struct.error) as exc:
        raise ScanError(f"{where}: corrupt or truncated archive ({exc})") from None
    listing.left_layout(layout)
    return listing


#: The first bytes of compressed files, and what compressed them.
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}


def compression_of(path: Path) -> str | None:
    """What compressed the file at ``path``, by its first bytes; None: nothing known."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    return next((kind for magic, kind in COMPRESSED.items() if head.startswith(magic)), None)


def tar_error(path: Path, exc: BaseException) -> ScanError:
    """The error of a tar that :mod:`tarfile` cannot read as a plain tar: a compressed file
    under a ``.tar`` name said as what it is, anything else as corrupt or truncated."""
    kind = compression_of(path)
    if kind == "zip":
        return ScanError(f"{path}: a zip archive under a .tar name: rename it to .zip")
    if kind:
        return ScanError(
            f"{path}: {kind}-compressed, not a plain tar: its images are read where they are, "
            f"at their offsets in the tar, which a compressed file has none of; decompress it "
            f"where it is, keeping its name (e.g. `mv {path.name} {path.name}.z && "
            f"{kind} -dc {path.name}.z > {path.name}`)"
        )
    return ScanError(f"{path}: corrupt or truncated archive ({exc})")


def archive_root(path: Path) -> dict[str, Any]:
    st = os.stat(path)
    return {"kind": "archive", "path": str(path), "size": st.st_size, "mtime": st.st_mtime_ns}


def tar_members(archive: tarfile.TarFile, where: str) -> tuple[list, list, list]:
    """(files, folders, others) of a tar: its regular members, folders, and the rest (links,
    devices: left out)."""
    files, folders, others = [], [], []
    for member in archive:
        if member.isfile() and not member.issparse():
            files.append(member)
        elif member.isdir():
            folders.append(member.name)
        else:
            others.append(member.name)
    return files, folders, others


def scan_tar(path: Path, root: int = 0) -> Listing:
    """An uncompressed tar's images read in place, at their offsets (module docstring)."""
    where = path.name
    try:
        with tarfile.open(path, "r:") as archive:
            files, folders, others = tar_members(archive, where)
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise tar_error(path, exc) from None
    try:
        layout = class_layout([m.name for m in files], folders, where)
    except LayoutError as exc:
        raise ScanError(str(exc)) from None
    listing = Listing([archive_root(path)], layout.classes)
    for k, label in zip(layout.samples, layout.labels, strict=True):
        member = files[k]
        check_member(member.name, member.size, member.size, where)
        listing.add_stored(member.name, root, member.size, member.offset_data, label)
    listing.left_layout(layout)
    listing.leave_out(LINKS, others)
    return listing


# --------------------------------------------------------------------------- folders


@dataclass
class Walked:
    """What :func:`walk` found under a folder: files (relative name, size, mtime), folders
    (relative name, mtime; '' is the folder itself), links leading out, other entries, links
    to a folder listed already."""

    files: list[tuple[str, int, int]] = field(default_factory=list)
    folders: list[tuple[str, int]] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    junk: list[str] = field(default_factory=list)
    relinked: list[str] = field(default_factory=list)


def inside(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip("/") + "/")


def walk(top: Path, base: Path | None = None, prefix: str = "") -> Walked:
    """Every file and folder under ``top`` (names relative to it, with ``prefix``): sizes and
    modification times from ``lstat``, a link followed where it stays inside ``base`` (the
    dataset's folder, resolved), named in ``outside`` where it leads out. A link to a folder
    is followed after every real folder has been walked, and only where it leads to one not
    walked yet: two class folders that link to each other stay two classes, each under its
    own name (``relinked`` names the links left out). Junk is not walked into
    (:func:`clusterbench.formats._layout.is_junk`). An unreadable folder raises
    :class:`ScanError` naming it."""
    real_base = os.path.realpath(base or top)
    found = Walked()
    seen: set[str] = set()
    stack = [(str(top), prefix)]
    linked: list[tuple[str, str]] = []
    while stack or linked:
        if not stack:  # the real folders are walked: now the links to folders
            path, name = linked.pop(0)
            if os.path.realpath(path) in seen:
                found.relinked.append(name)
            else:
                stack.append((path, name))
            continue
        folder, rel = stack.pop()
        real = os.path.realpath(folder)
        if real in seen:
            continue  # a link back to a folder already walked
        seen.add(real)
        walk_folder(folder, rel, real_base, found, stack, linked)
    return found


def walk_folder(
    folder: str,
    rel: str,
    real_base: str,
    found: Walked,
    stack: list[tuple[str, str]],
    linked: list[tuple[str, str]],
) -> None:
    """One folder of :func:`walk`: its files into ``found``, its folders onto ``stack``, its
    links to folders onto ``linked``."""
    try:
        found.folders.append((rel, os.stat(folder).st_mtime_ns))
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise ScanError(f"{folder} cannot be read ({exc.strerror or exc})") from None
    for entry in entries:
        name = f"{rel}/{entry.name}" if rel else entry.name
        if is_junk((entry.name,)):
            found.junk.append(name)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            link = stat.S_ISLNK(st.st_mode)
            if link:
                target = os.path.realpath(entry.path)
                if not inside(target, real_base):
                    found.outside.append(f"{name} -> {target}")
                    continue
                st = os.stat(entry.path)
        except OSError as exc:
            raise ScanError(f"{entry.path} cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISDIR(st.st_mode):
            (linked if link else stack).append((entry.path, name))
        elif stat.S_ISREG(st.st_mode):
            found.files.append((name, st.st_size, st.st_mtime_ns))
        else:
            found.special.append(name)


def split_layout(path: Path) -> list[str] | None:
    """The split folders of ``path`` (``train`` and ``val``/``test``) when it is laid out
    that way, else None (one folder per class)."""
    try:
        names = {e.name for e in os.scandir(path) if e.is_dir() and not is_junk((e.name,))}
    except OSError as exc:
        raise ScanError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if "train" in names and names <= set(SPLIT_FOLDERS) and len(names) > 1:
        return [s for s in SPLIT_FOLDERS if s in names]
    return None


def refuse_links_and_specials(walked: Walked, path: Path) -> None:
    if walked.outside:
        raise ScanError(
            f"{path}: {len(walked.outside)} symbolic link(s) lead out of the folder "
            f"({', '.join(walked.outside[:3])}): refused (copy the files in, or point path at "
            "a folder that holds them)"
        )
    if walked.special:
        raise ScanError(f"{path}: {walked.special[0]} is not a regular file or folder")


def scan_folder(path: Path) -> Listing:
    """A folder's images read in place (module docstring); ``path`` is absolute."""
    splits = split_layout(path)
    listing = Listing([{"kind": "folder", "path": str(path)}], ())
    parts = [(s, f"{s}") for s in splits] if splits else [(None, "")]
    walks = {}
    for split, rel in parts:
        walked = walk(path / rel if rel else path, path, rel)
        refuse_links_and_specials(walked, path)
        walks[split] = walked
        for name, mtime in walked.folders:
            listing.dirs["root"].append(0)
            listing.dirs["name"].append(name)
            listing.dirs["mtime"].append(mtime)
    if splits:
        listing.dirs["root"].insert(0, 0)
        listing.dirs["name"].insert(0, "")
        listing.dirs["mtime"].insert(0, os.stat(path).st_mtime_ns)
    # train/ and val/ alone: val/ is the held-out test split (ImageNet's convention); the
    # validation split is then carved from train/
    codes = {"train": 0, "val": 1 if splits and "test" in splits else 2, "test": 2, None: -1}
    listing.classes = fill(listing, walks, path, codes)
    return listing


def fill(
    listing: Listing, walks: dict[str | None, Walked], path: Path, codes: dict[str | None, int]
) -> tuple[str, ...]:
    """Add each walk's images to ``listing`` (class layout per split: the training folder's
    classes for all), sorted by name; the classes."""
    classes: tuple[str, ...] | None = None
    for split, walked in walks.items():
        rel = f"{split}/" if split else ""
        files = sorted(walked.files)
        names = [n[len(rel) :] for n, _, _ in files]
        folders = [n[len(rel) :] for n, _ in walked.folders if n.startswith(rel)]
        where = f"{path}/{rel}".rstrip("/")
        try:
            layout = class_layout(names, folders, where, top=split is None)
        except LayoutError as exc:
            raise ScanError(str(exc)) from None
        if classes is None:
            classes = layout.classes
        elif not set(layout.classes) <= set(classes):
            extra = sorted(set(layout.classes) - set(classes))
            raise ScanError(f"{where}: class folder(s) {extra} have no images in {path}/train")
        index = {c: k for k, c in enumerate(classes)}
        code = codes[split]
        for k, label in zip(layout.samples, layout.labels, strict=True):
            name, size, mtime = files[k]
            label = index[layout.classes[label]]
            listing.add_file(name, 0, size, mtime, label, code)
            check_member(name, size, size, str(path))
        listing.leave_out(JUNK, walked.junk)
        listing.leave_out(RELINKED, walked.relinked)
        listing.left_layout(layout, rel)
    return classes or ()
