"""Where the workflow's files are, relative to its working directory (as rules/*.smk declare
them; Snakemake puts a module's ``prefix:`` in front: :meth:`Adapter.in_workdir`)."""

from __future__ import annotations

from clusterbench.config import storage

#: The files ``meta.json`` records for each storage (an image folder's ``files/`` is a folder:
#: its index records each image).
RECORDED = {
    "arrays": storage.ARRAY_FILES,
    "files": (storage.INDEX,),
    "extracted": (storage.INDEX,),
    "synthetic": (),
}


def manifest(dataset: str) -> str:
    return f"results/raw/{dataset}/MANIFEST.json"


def data_dir(dataset: str) -> str:
    return f"results/data/{dataset}"


def stored_files(dataset: str, stored: str = "arrays") -> list[str]:
    """Every file of a preprocessed dataset stored as ``stored`` (arrays, or an image folder's
    files: :mod:`clusterbench.config.storage`); meta.json (written last) comes last."""
    return [f"{data_dir(dataset)}/{name}" for name in storage.data_files(stored)]


def run_dir(run: str) -> str:
    return f"results/runs/{run}"


def eval_dir(run: str) -> str:
    return f"results/eval/{run}"
