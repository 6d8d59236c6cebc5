"""``format: imagenet``: ImageNet (ILSVRC2012) as it is published, read where it is
(``datasets.<name>.path``), nothing copied or extracted.

``path`` is the folder that holds the three official files:

* ``ILSVRC2012_img_train.tar``: a tar of 1,000 tars, one per class (``n01440764.tar``...),
  of the training JPEGs;
* ``ILSVRC2012_img_val.tar``: the 50,000 validation JPEGs, flat
  (``ILSVRC2012_val_00000001.JPEG``...);
* ``ILSVRC2012_devkit_t12.tar.gz``: its ``data/meta.mat`` (the synsets: the 1,000 classes are
  its leaves, ``num_children == 0``) and ``data/ILSVRC2012_validation_ground_truth.txt`` (the
  validation images' labels, as ILSVRC2012_IDs, in file-name order);

or their extracted forms: a ``train/`` folder of class folders, a ``val/`` folder (flat, or
of class folders) and the devkit's ``ILSVRC2012_devkit_t12/`` folder (or its ``.tar.gz``).

The classes are the leaf synsets in WNID order (the order of torchvision's ``ImageNet`` and
``ImageFolder``), named by WNID and the first of their words (``n01440764 tench``). The
official validation set is the test split; the validation split is carved from training by
``val_fraction``. Reading it: :mod:`clusterbench.data.imagenet` (``scipy`` reads
``meta.mat``, at preprocessing only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterbench.formats import FormatError, Images

FILES = (0,)
SUFFIXES = None
RESIZES = True
#: Stored as its image files, read in place by the loader (the only storage it takes).
EXTRACTS = True
#: Read from a folder (``datasets.<name>.path``), required.
PATH = "required"
#: Only ``storage: files``: 1.28 M images decoded into arrays would be a copy larger than the
#: dataset.
STORAGES = ("files",)

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT_TAR = "ILSVRC2012_devkit_t12.tar.gz"
DEVKIT_DIR = "ILSVRC2012_devkit_t12"
META = "data/meta.mat"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"


def missing(folder: Path) -> list[str]:
    """What ``folder`` lacks of ImageNet's files (each as the archive or its extracted form);
    empty when it has them all. The standard library only: asked before any job."""
    problems = []
    for archive, extracted in ((TRAIN_TAR, "train"), (VAL_TAR, "val"), (DEVKIT_TAR, DEVKIT_DIR)):
        if not (folder / archive).is_file() and not (folder / extracted).is_dir():
            problems.append(f"{archive} (or its extracted {extracted}/)")
    return problems


def decode(
    files: Sequence[Path],
    image_size: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Images:
    raise FormatError("ImageNet is read in place and stored as files (storage: files)")
