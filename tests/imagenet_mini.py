"""An ImageNet (ILSVRC2012) miniature with the real structure, made by the tests:

* ``ILSVRC2012_img_train.tar``: a tar of per-class tars (``n01440764.tar``, ...) of JPEGs
  (``n01440764_1.JPEG``, ...);
* ``ILSVRC2012_img_val.tar``: flat JPEGs ``ILSVRC2012_val_00000001.JPEG``, ...;
* ``ILSVRC2012_devkit_t12.tar.gz``: ``ILSVRC2012_devkit_t12/data/meta.mat`` (written with
  ``scipy.io.savemat``: the synsets as a struct array with the devkit's fields, the leaves
  with ILSVRC2012_IDs that are *not* in WNID order, and inner WordNet nodes among them, which
  must be ignored) and ``data/ILSVRC2012_validation_ground_truth.txt`` (one ILSVRC2012_ID per
  validation image, in the order of their numbers).

:func:`extracted` lays the same out as folders (``train/`` of class folders, ``val/`` flat,
``ILSVRC2012_devkit_t12/``).
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

#: The leaves: (ILSVRC2012_ID, WNID, words). IDs in another order than the WNIDs.
LEAVES = (
    (3, "n01440764", "tench, Tinca tinca"),
    (1, "n01443537", "goldfish, Carassius auratus"),
    (4, "n01484850", "great white shark, white shark, man-eater, Carcharodon carcharias"),
    (2, "n01491361", "tiger shark, Galeocerdo cuvieri"),
)
#: Inner WordNet nodes (num_children > 0): in meta.mat, not classes.
INNER = (
    (1001, "n01473806", "aquatic vertebrate", [1002]),
    (1002, "n02512053", "fish", [1, 2, 3, 4]),
)


@dataclass
class Mini:
    folder: Path
    #: Each validation image's WNID, by its number (1-based: index 0 is image 1).
    val_wnids: list[str]
    train_per_class: int


def jpeg(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    rng = np.random.default_rng(seed)
    array = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    array[:, : size[0] // (1 + seed % 4)] = 240  # some structure
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def tar_bytes(members: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def meta_mat(leaves=LEAVES, inner=INNER, fields: tuple[str, ...] | None = None) -> bytes:
    """The devkit's ``data/meta.mat``: ``synsets``, a struct array (scipy.io.savemat)."""
    import scipy.io

    names = fields or (
        "ILSVRC2012_ID",
        "WNID",
        "words",
        "gloss",
        "num_children",
        "children",
        "wordnet_height",
        "num_train_images",
    )
    rows = [(i, w, words, [], 0, 1300) for i, w, words in leaves]
    rows += [(i, w, words, children, len(children), 0) for i, w, words, children in inner]
    synsets = np.zeros((len(rows), 1), dtype=[(n, "O") for n in names])
    for k, (ident, wnid, words, children, n_children, n_train) in enumerate(rows):
        values = {
            "ILSVRC2012_ID": np.array([[ident]], dtype=np.uint16),
            "WNID": wnid,
            "words": words,
            "gloss": f"the gloss of {words.split(',')[0]}",
            "num_children": np.array([[n_children]], dtype=np.uint16),
            "children": np.array([children], dtype=np.uint16).reshape(1, -1),
            "wordnet_height": np.array([[0 if not children else 1]], dtype=np.uint16),
            "num_train_images": np.array([[n_train]], dtype=np.uint16),
        }
        for name in names:
            synsets[k, 0][name] = values.get(name, "")
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"synsets": synsets})
    return buf.getvalue()


def make(folder: Path, train_per_class: int = 12, val: int = 16, seed: int = 0, **devkit) -> Mini:
    """The three official files in ``folder`` (module docstring). ``devkit``: overrides of
    its members' bytes (``meta``, ``truth``), or ``truth_lines`` to cut the ground truth."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    inner_tars = {}
    for k, (_, wnid, _) in enumerate(LEAVES):
        images = {f"{wnid}_{i + 1}.JPEG": jpeg(100 * k + i) for i in range(train_per_class)}
        inner_tars[f"{wnid}.tar"] = tar_bytes(images)
    (folder / "ILSVRC2012_img_train.tar").write_bytes(tar_bytes(inner_tars))
    ids = rng.integers(1, len(LEAVES) + 1, val)
    by_id = {i: w for i, w, _ in LEAVES}
    val_images = {f"ILSVRC2012_val_{n + 1:08d}.JPEG": jpeg(10_000 + n) for n in range(val)}
    # stored out of name order, as a tar may be: the index sorts them by number
    (folder / "ILSVRC2012_img_val.tar").write_bytes(tar_bytes(dict(reversed(val_images.items()))))
    truth = "".join(f"{i}\n" for i in ids)
    if "truth_lines" in devkit:
        truth = "".join(truth.splitlines(keepends=True)[: devkit["truth_lines"]])
    members = {
        "ILSVRC2012_devkit_t12/data/meta.mat": devkit.get("meta", meta_mat()),
        "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt": devkit.get(
            "truth", truth.encode()
        ),
        "ILSVRC2012_devkit_t12/COPYING": b"devkit licence\n",
    }
    (folder / "ILSVRC2012_devkit_t12.tar.gz").write_bytes(tar_bytes(members, "w:gz"))
    return Mini(folder, [by_id[int(i)] for i in ids], train_per_class)


def extracted(mini: Mini, folder: Path) -> Path:
    """The same data as extracted folders: ``train/<wnid>/``, ``val/`` flat, the devkit's
    folder."""
    for name, target in (
        ("ILSVRC2012_img_val.tar", folder / "val"),
        ("ILSVRC2012_devkit_t12.tar.gz", folder),
    ):
        with tarfile.open(mini.folder / name) as tar:
            tar.extractall(target, filter="data")
    with tarfile.open(mini.folder / "ILSVRC2012_img_train.tar") as outer:
        for member in outer:
            wnid = member.name.removesuffix(".tar")
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                inner.extractall(folder / "train" / wnid, filter="data")
    return folder
