"""Each rule's slice of a resolved config: the params a rule passes as one canonical JSON
string, so that Snakemake's params rerun trigger reruns exactly the stages whose slice changed.

Settings that cannot change a result (download retries, the cache location, scheduler
resources, how the data is read) are kept out of the slices on purpose.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from clusterbench.config import experiments as expansion
from clusterbench.config import storage
from clusterbench.config.datasets import DATASETS as BUILTIN_DATASETS
from clusterbench.config.datasets import declared_file_name
from clusterbench.config.schema import (
    COMM_KEYS,
    DATA_SETTINGS_KEYS,
    PREPROCESS_KEYS,
    TRAIN_KEYS,
    canonical_json,
)
from clusterbench.formats import FORMATS, format_module, is_synthetic


def config_hash(config: Mapping[str, Any]) -> str:
    """Short hash of everything in a resolved config that can change a result.

    Shown in the report for provenance. Download settings and job resources are left out, like
    from the rules' params: changing them changes no result, so it must not rerun the report.
    """
    relevant = {
        "datasets": {
            name: {**preprocess_slice(ds), **download_slice(ds)}
            for name, ds in config["datasets"].items()
        },
        "runs": [train_slice(run) for run in config["runs"]],
        "evaluate": config["evaluate"],
        "report": config["report"],
        "comm": comm_slice(config["comm"]),
    }
    return hashlib.sha256(canonical_json(relevant).encode()).hexdigest()[:12]


def extractable(datasets: Mapping[str, Mapping[str, Any]]) -> dict[str, bool]:
    """Dataset -> whether its format can be stored as files (its module's ``EXTRACTS``)."""
    found = {}
    for name, ds in datasets.items():
        spec = BUILTIN_DATASETS.get(name)
        fmt = spec.format if spec is not None else ds.get("format")
        found[name] = fmt in FORMATS.names() and getattr(format_module(fmt), "EXTRACTS", False)
    return found


def data_settings(run: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The train stage's ``--data-settings``: the run's :data:`DATA_SETTINGS_KEYS` and the
    config's ``staging``. No rerun trigger (rules/train.smk)."""
    return {**{k: run[k] for k in DATA_SETTINGS_KEYS}, "staging": dict(config["staging"])}


def train_slice(run: Mapping[str, Any]) -> dict[str, Any]:
    """The train rule's ``--run``: the training keys, and for a run an experiment expanded to,
    ``experiment`` (where it came from: clusterbench.config.experiments.origin, recorded in
    run.json). Hand-written runs have no ``experiment`` key: their slice is what it was."""
    train = {k: run[k] for k in TRAIN_KEYS}
    block = expansion.origin(run)
    if block is not None:
        train["experiment"] = block
    return train


def preprocess_slice(dataset_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """How a dataset is split, and for a declared one, how its files are read: its
    :data:`PREPROCESS_KEYS`, ``files`` as their names, ``storage`` only when it is ``files``
    (:func:`clusterbench.config.storage.preprocess_storage`)."""
    split = {
        key: dataset_cfg[key] for key in PREPROCESS_KEYS if key in dataset_cfg and key != "storage"
    }
    split.update(storage.preprocess_storage(dataset_cfg))
    if "files" in split:
        split["files"] = [declared_file_name(entry) for entry in split["files"]]
    if "image_size" in split:
        split["image_size"] = list(split["image_size"])
    return split


def synthetic_dataset(dataset_cfg: Mapping[str, Any]) -> bool:
    """Whether a resolved dataset entry is generated where it trains (its format is
    ``synthetic`` or ``synthetic-text``): it has no files, and its preprocessing writes
    ``meta.json`` alone."""
    fmt = dataset_cfg.get("format")
    return fmt in FORMATS and is_synthetic(fmt)


def download_slice(dataset_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Where a dataset's files come from (``clusterbench.download``'s ``source``).

    Retries, timeouts and the cache location are left out on purpose: they cannot change the
    (checksum-pinned) bytes, so changing them must not make anything stale.
    """
    source: dict[str, Any] = {}
    if dataset_cfg.get("mirror"):
        source["mirror"] = dataset_cfg["mirror"]
    if dataset_cfg.get("urls"):
        source["files"] = {name: {"url": url} for name, url in dataset_cfg["urls"].items()}
    if dataset_cfg.get("path"):  # read in place: its folder, no file
        return {"source": source, "path": dataset_cfg["path"]}
    if "format" in dataset_cfg:  # a declared dataset: its files (synthetic data has none)
        return {
            "source": source,
            "declared": [
                {**entry, "name": declared_file_name(entry)}
                for entry in dataset_cfg.get("files", ())
            ],
        }
    return {"source": source}


def comm_slice(comm: Mapping[str, Any]) -> dict[str, Any]:
    """How the comm stage measures (its :data:`COMM_KEYS`): part of every comm job's params,
    beside the job's environment and backend (:mod:`clusterbench.pipeline.comm_jobs`)."""
    return {key: comm[key] for key in COMM_KEYS}
