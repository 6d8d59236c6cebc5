"""An image folder in a ``.tar.gz`` (or ``.tgz``) stored as files: a gzip stream cannot be read
at an offset, so its images are extracted once into ``files/`` of the data dir: the
workflow's one copy (a ``.zip`` or ``.tar`` is read where it is: :mod:`clusterbench.data.scan`).

* ``files/NNNN/NNNNNNN.<ext>``: image number N of the archive (in its order) under the folder
  of its thousand (:func:`clusterbench.data.index.copy_path`); the names hold no part of the
  archive's but the extension (nothing lands outside ``files/``). Extracted into a hidden
  folder first and renamed into place when complete.
* Before anything is extracted, the archive's members are checked
  (:func:`clusterbench.formats.image_folder.archive_samples`: names that leave the folder,
  members too large to be images, an archive that inflates like a bomb) and the bytes its
  images take against the free space of the data dir's file system.
* Each image's sha256 is taken as it is written: what staging checks a copy against.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from clusterbench.data.index import copy_path
from clusterbench.data.loading import gib
from clusterbench.data.scan import Listing, ScanError
from clusterbench.formats._layout import LayoutError
from clusterbench.formats.image_folder import archive_samples


def unpack(archive: Path, out_dir: Path) -> Listing:
    """Extract ``archive``'s images into ``out_dir/files`` (module docstring), atomically: a
    hidden folder first, renamed when every file is written."""
    try:
        layout, members, data = archive_samples(archive)
    except LayoutError as exc:
        raise ScanError(str(exc)) from None
    need = sum(size for _, size in members)
    out_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise ScanError(
            f"{archive.name}: its images take {need:,} bytes ({gib(need)}) extracted, "
            f"{free:,} ({gib(free)}) are free in {out_dir}: not extracted"
        )
    partial = out_dir / ".files.partial"
    shutil.rmtree(partial, ignore_errors=True)
    listing = Listing([{"kind": "copy", "path": "."}], layout.classes)
    for row, ((name, _), blob, label) in enumerate(zip(members, data, layout.labels, strict=True)):
        target = partial / copy_path(row, name).removeprefix("files/")
        if row % 1000 == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        listing.add_file(name, 0, len(blob), 0, label)
        listing.sha256.append(hashlib.sha256(blob).digest())
    listing.left_layout(layout)
    final = out_dir / "files"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    return listing
