"""Which files of an image folder are its images, and their classes: one set of rules for an
archive's members and a folder's files (``image-folder``, ``imagenet``'s training folders).

* **Junk is left out, and counted:** hidden files and folders (a name starting with ``.``:
  ``.DS_Store``, macOS's ``._name`` twins, ``.ipynb_checkpoints``), ``__MACOSX/`` and Windows'
  ``Thumbs.db`` and ``desktop.ini``.
* **Names that leave the folder are refused**, naming them: an absolute name (``/tmp/x.png``,
  ``C:\\x.png``) or one with a ``..`` part.
* **Classes:** the images (files named ``.png``, ``.jpg``, ``.jpeg``) lie in one folder per
  class, all optionally under one top-level folder; the class is that folder's name, whatever
  lies deeper. An image outside any class folder is refused. Any other file inside a class
  folder is one of its samples too (the loader then finds that it is no image, and the run's
  ``on_bad_file`` decides); one outside the class folders (a ``README.txt`` beside them) is
  left out and counted.
* **Class names** are the folders' names in Unicode's composed form (NFC: an accent typed as a
  letter and a combining accent, as macOS writes file names, is one character). A folder name
  with an invisible or control character (a zero-width space, a byte-order mark) is refused,
  naming the character (:mod:`clusterbench.core.names`); so are two folders whose names are
  one name in two spellings.
* **A member listed twice** under one name (an archive appended to) is taken once, its last
  copy, as tar and unzip take it when they extract; a warning names it, and the earlier
  copies are counted as left out.
* **A class folder without an image is refused**, naming it (a folder the archive lists, or a
  folder on disk, with no PNG or JPEG in it).

Only the standard library: the config check imports the formats while the Snakefile is parsed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from clusterbench.core import names
from clusterbench.formats import FormatError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: The largest image file (bytes) read whole into memory: a PNG or JPEG within the pixel
#: limit (clusterbench.formats._pixels.MAX_PIXELS, 3 bytes each) is smaller.
MAX_MEMBER_BYTES = 512 << 20
#: A member over 1 MiB that would inflate more than this many times its stored bytes is
#: refused (images are compressed already: a PNG of noise inflates about 1x, a plain one
#: tens of times), and so is an archive whose images inflate more than this in all.
MAX_RATIO = 200
#: Operating-system files left out wherever they are (compared in lower case).
JUNK_NAMES = frozenset({"thumbs.db", "desktop.ini", "__macosx"})
_DRIVE = re.compile(r"^[A-Za-z]:")
log = logging.getLogger(__name__)


class LayoutError(FormatError):
    """The files are not an image folder; the message names what is wrong (the caller adds the
    archive or folder)."""


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def is_junk(parts: Sequence[str]) -> bool:
    """Whether a path (its parts) is an operating system's file or lies in such a folder."""
    return any(p.startswith(".") or p.lower() in JUNK_NAMES for p in parts)


def unsafe(name: str) -> bool:
    """Whether a member name would leave the folder it is extracted into."""
    text = name.replace("\\", "/")
    return text.startswith("/") or bool(_DRIVE.match(text)) or ".." in text.split("/")


def parts_of(name: str) -> tuple[str, ...]:
    """A member name's parts (``./`` and empty parts dropped)."""
    return tuple(p for p in name.split("/") if p not in ("", "."))


def check_member(name: str, size: int, stored: int, where: str) -> None:
    """Refuse a member too large to be an image, or one that inflates like a bomb."""
    if size > MAX_MEMBER_BYTES:
        raise LayoutError(
            f"{where}: {name} is {size:,} bytes, more than any PNG or JPEG within the pixel "
            f"limit ({MAX_MEMBER_BYTES:,} bytes): refused (a decompression bomb?)"
        )
    if size > 1 << 20 and size > MAX_RATIO * max(stored, 1):
        raise LayoutError(
            f"{where}: {name} would inflate from {stored:,} to {size:,} bytes "
            f"({size / max(stored, 1):,.0f} times; images inflate at most {MAX_RATIO} times): "
            "refused (a decompression bomb?)"
        )


def refuse_unsafe(names: Sequence[str], where: str) -> None:
    bad = [n for n in names if unsafe(n)]
    if bad:
        shown = ", ".join(repr(n) for n in bad[:5]) + (
            f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        )
        raise LayoutError(
            f"{where}: {len(bad)} member name(s) lead out of the folder ({shown}): an absolute "
            "name or a '..' part; refused (remake the archive with relative names)"
        )


@dataclass
class Layout:
    """What :func:`class_layout` found: the samples (indices into the names given), their
    labels (indices into ``classes``, sorted), and what was left out, by reason."""

    classes: tuple[str, ...]
    samples: list[int]
    labels: list[int]
    junk: list[str] = field(default_factory=list)
    loose: list[str] = field(default_factory=list)
    #: Members listed again later under the same name: their earlier copies, left out.
    earlier: list[str] = field(default_factory=list)


def class_layout(
    names: Sequence[str], folders: Sequence[str] = (), where: str = "", top: bool = True
) -> Layout:
    """The classes of the files ``names`` (relative, ``/``-separated) given the folders
    ``folders`` that exist (an archive's folder entries, a directory tree's folders): module
    docstring. ``top``: the images may all sit under one top-level folder."""
    refuse_unsafe([*names, *folders], where)
    parts = [parts_of(n) for n in names]
    earlier = earlier_copies(parts, names, where)
    kept = [i for i, p in enumerate(parts) if p and not is_junk(p) and i not in earlier]
    junk = [names[i] for i, p in enumerate(parts) if p and is_junk(p) and i not in earlier]
    images = [i for i in kept if is_image_name(parts[i][-1])]
    if not images:
        raise LayoutError(
            f"{where}: no PNG or JPEG images"
            + (f" ({len(junk)} operating-system file(s) left out)" if junk else "")
        )
    tops = {parts[i][0] for i in images}
    level = 1 if top and len(tops) == 1 and all(len(parts[i]) >= 3 for i in images) else 0
    loose_images = [names[i] for i in images if len(parts[i]) < level + 2]
    if loose_images:
        raise LayoutError(
            f"{where}: {loose_images[0]} is not in a class folder (one folder per class expected"
            + (f" under {next(iter(tops))}/" if level else "")
            + ")"
        )
    prefix = parts[images[0]][:level]
    inside = [i for i in kept if len(parts[i]) >= level + 2 and parts[i][:level] == prefix]
    folder_names = sorted({parts[i][level] for i in images})
    named = class_names(folder_names, "/".join(prefix), where)
    classes = tuple(sorted(set(named.values())))
    # the folders given, and those the kept files lie in (an archive need not list them)
    known = [parts_of(f) for f in folders] + [parts[i][:-1] for i in kept]
    empty = sorted(
        {p[level] for p in known if len(p) > level and p[:level] == prefix and not is_junk(p)}
        - set(folder_names)
    )
    if empty:
        shown = "/".join([*prefix, empty[0]])
        raise LayoutError(
            f"{where}: class folder {shown}/ holds no PNG or JPEG image"
            + (
                f" (nor do {len(empty) - 1} more: {', '.join(empty[1:4])})"
                if len(empty) > 1
                else ""
            )
            + ": remove it, or put its images in"
        )
    index = {folder: classes.index(name) for folder, name in named.items()}
    inside = [i for i in inside if parts[i][level] in index]
    taken = set(inside)
    loose = [names[i] for i in kept if i not in taken]
    labels = [index[parts[i][level]] for i in inside]
    return Layout(classes, inside, labels, junk, loose, [names[i] for i in sorted(earlier)])


def earlier_copies(parts: Sequence[tuple[str, ...]], names: Sequence[str], where: str) -> set[int]:
    """The indices of members an archive lists again later under the same name (``parts``):
    tar and unzip extract each copy over the one before, so the last is taken, as theirs, and
    a warning names them."""
    last = {p: i for i, p in enumerate(parts)}
    earlier = {i for i, p in enumerate(parts) if p and last[p] != i}
    if earlier:
        twice = list(dict.fromkeys(names[last[parts[i]]] for i in sorted(earlier)))
        shown = ", ".join(twice[:3]) + (f" and {len(twice) - 3} more" if len(twice) > 3 else "")
        log.warning(
            "%s: %d member name(s) appear more than once (%s): the last copy of each is taken, "
            "as tar and unzip take it, and %d earlier cop(ies) left out",
            where,
            len(twice),
            shown,
            len(earlier),
        )
    return earlier


def class_names(folders: Sequence[str], prefix: str, where: str) -> dict[str, str]:
    """Each class folder's name -> its class name: the name in NFC
    (:func:`clusterbench.core.names.normal`). A name with an invisible or control character,
    and two folders whose names are one name in two spellings, are refused naming them."""
    named: dict[str, str] = {}
    for folder in folders:
        shown = "/".join(p for p in (prefix, folder) if p)
        hidden = names.problem(folder)
        if hidden:
            raise LayoutError(
                f"{where}: class folder {shown!r} {hidden}: rename it (the class name is "
                "drawn in the report, and no one could see the difference)"
            )
        named[folder] = names.normal(folder)
    seen: dict[str, str] = {}
    for folder, name in named.items():
        if name in seen:
            raise LayoutError(
                f"{where}: class folders {ascii(seen[name])} and {ascii(folder)} are one name "
                f"written two ways ({name!r}, its accents composed and decomposed): merge them"
            )
        seen[name] = folder
    return named
