"""How preprocessing stores a dataset, and which runs may read it how.

* ``arrays`` (every format): decoded once into ``{split}_{x,y}.npy`` uint8 arrays and
  ``meta.json``. A run reads them resident (every rank holds them in memory) or streamed
  (memory-mapped, its share of each batch read by loader processes): the same batches either
  way.
* ``files`` (a format whose module sets ``EXTRACTS``: ``image-folder``, ``imagenet``):
  ``index.npz`` (where each image's bytes are, its size, class and split:
  :mod:`clusterbench.data.index`) and ``meta.json``; the images are read where they are (a
  folder, a ``.zip`` or ``.tar``'s members at their offsets), or, from a ``.tar.gz`` (a gzip
  stream cannot be read at an offset), extracted into ``files/`` first (``extracted``: the
  one copy). The loader processes decode each batch's images at the model's input size. Such
  a dataset can only be streamed.
* ``synthetic`` (formats ``synthetic`` and ``synthetic-text``, not a setting): no file but
  ``meta.json``; the training device generates the data (:mod:`clusterbench.data.synthetic`).

A dataset's ``storage: null`` (the default) is decided by its runs when the config is read
(:func:`resolve`): ``files`` for a dataset read in place (``path``), and for an extractable
format that a run streams (``loading: stream``), else ``arrays``. The resolved value is in the
preprocess rule's params (only when it is ``files``: the slices of array datasets stay what
they were), so a change of it preprocesses
the dataset again, and the new files retrain its runs.

Only the standard library: the Snakefile imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STORAGES = ("arrays", "files")

#: What preprocessing writes into ``results/data/<dataset>/`` for each storage; ``meta.json``
#: (written last, recording the others' sizes and sha256) comes last.
ARRAY_FILES = tuple(f"{split}_{kind}.npy" for split in ("train", "val", "test") for kind in "xy")
INDEX = "index.npz"


#: What each way of storing writes besides ``meta.json`` (``extracted``: files stored as
#: the workflow's copy, ``files/`` a folder).
OUTPUTS = {
    "arrays": ARRAY_FILES,
    "files": (INDEX,),
    "extracted": ("files", INDEX),
    "synthetic": (),
}
#: Archives whose members cannot be read at an offset: stored as files, they are extracted.
EXTRACTED_SUFFIXES = (".tar.gz", ".tgz")


def data_files(storage: str) -> list[str]:
    """The names preprocessing writes for ``storage`` (``files`` is a folder), meta.json last."""
    return [*OUTPUTS[storage], "meta.json"]


def stored_as(ds: Mapping[str, Any]) -> str:
    """How a resolved dataset entry's preprocessing stores it (a key of :data:`OUTPUTS` but
    ``synthetic``): its ``storage``, and for files whether they are extracted (an archive
    that is a gzip stream) or read where they are."""
    if ds.get("storage") != "files":
        return "arrays"
    files = ds.get("files") or ()
    if not ds.get("path") and files:
        from clusterbench.config.datasets import declared_file_name

        if declared_file_name(files[0]).endswith(EXTRACTED_SUFFIXES):
            return "extracted"
    return "files"


def read_meta(data_dir: Path) -> dict[str, Any]:
    """A preprocessed data dir's ``meta.json``."""
    from clusterbench.core.params import read_json_object

    return read_json_object(data_dir / "meta.json", f"is {data_dir} a preprocessed data dir?")


def storage_of(meta: Mapping[str, Any]) -> str:
    """The storage a preprocessed data dir's ``meta.json`` records (older ones: arrays)."""
    if meta.get("synthetic"):
        return "synthetic"
    return meta.get("storage") or "arrays"


def resolve(
    datasets: Mapping[str, dict[str, Any]],
    runs: Sequence[tuple[str, Mapping[str, Any]]],
    extracts: Mapping[str, bool],
) -> list[str]:
    """Set each dataset's ``storage`` (module docstring) and return the problems, each naming
    its key: ``files`` for a format that cannot be extracted, a run that must be resident on a
    dataset stored as files, runs streaming and resident on one image folder with ``storage``
    unset. ``runs``: ``(where, run)``; ``extracts``: dataset -> whether its format extracts."""
    problems = []
    for name, ds in datasets.items():
        mine = [(where, run) for where, run in runs if run["dataset"] == name]
        streamed = [where for where, run in mine if run["loading"] == "stream"]
        resident = [where for where, run in mine if run["loading"] == "resident"]
        storage = ds.get("storage")
        if storage is None and ds.get("path") and extracts.get(name, False):
            storage = "files"  # read in place: its index only (config.path_problems)
        if storage == "files" and not extracts.get(name, False):
            problems.append(
                f"datasets.{name}.storage: files is for image-folder datasets (their images "
                "extracted and decoded per batch); this one is stored as arrays"
            )
            storage = "arrays"
        if storage is None:
            if streamed and resident and extracts.get(name, False):
                problems.append(
                    f"datasets.{name}.storage: {streamed[0]} streams image folder {name!r} (its "
                    f"files decoded per batch) and {resident[0]} holds it in memory (decoded "
                    "once into arrays): set storage: arrays (both read the arrays) or files "
                    "(every run streams)"
                )
            storage = "files" if streamed and extracts.get(name, False) else "arrays"
        ds["storage"] = storage
        if storage == "files":
            problems += [
                f"{where}.loading: resident, but dataset {name!r} is stored as image files "
                "(storage: files), which only stream: use loading: stream or auto"
                for where in resident
            ]
    return problems


def preprocess_storage(dataset_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The preprocess slice's part of ``storage``: ``{"storage": "files"}`` for files, nothing
    for arrays (what every slice was before storage existed)."""
    return {"storage": "files"} if dataset_cfg.get("storage") == "files" else {}
