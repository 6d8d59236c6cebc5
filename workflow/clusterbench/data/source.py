"""The one place a run's data source is chosen (:func:`open_source`), and what the train stage
checks of the data before any backend starts (:func:`check`).

The sources today, by the dataset's storage (``meta.json``) and the loading decision
(:mod:`clusterbench.data.loading`):

==========  ==========  =====================================================================
storage     loading     source
==========  ==========  =====================================================================
arrays      resident    :class:`~clusterbench.data.resident.ResidentImages`
arrays      stream      :class:`~clusterbench.data.stream.StreamedImages` over
                        :class:`~clusterbench.data.stream.ArrayReader` (memory-mapped)
files       stream      :class:`~clusterbench.data.stream.StreamedImages` over
                        :class:`~clusterbench.data.folder.FileReader` (decoded per batch)
arrays      resident    a text's token windows (``task: language-model``):
            (always)    :class:`~clusterbench.data.tokens.ResidentTokens`
synthetic   resident    images or tokens generated on the training device
            (always)    (:mod:`clusterbench.data.synthetic`), at the dataset's or the model's
                        shape (:func:`shape_of`)
==========  ==========  =====================================================================

A new kind of data adds its branch to :func:`open_source`, keyed by what its ``meta.json`` (or
manifest) says, and gives the loop the attributes :mod:`clusterbench.data.resident` lists. Each
source made here carries ``facts``: how ``loading`` was decided and the node's staging, for
``run.json`` (:mod:`clusterbench.data.record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.config import RESIDENT_MEMORY_FRACTION
from clusterbench.config.storage import read_meta, storage_of
from clusterbench.data import augment as augmentation
from clusterbench.data import loading
from clusterbench.data.images import input_shape


@dataclass(frozen=True)
class Reading:
    """How this rank reads its data: the settings (``--data-settings``: ``loading``,
    ``loader_workers``), its node's ranks and CPUs per rank, and the staging facts (or None)."""

    settings: Mapping[str, Any]
    local_ranks: int
    rank_cpus: int
    staging: dict[str, Any] | None = None


def identity(meta: Mapping[str, Any]) -> str:
    """What names the data a run trains on, as 16 hex digits: the sha256 of its ``meta.json``'s
    file records (each file's size and sha256: the arrays, or an image folder's index, which
    holds every image's size and modification time) or, for data without files (synthetic),
    of the whole ``meta.json``. A checkpoint keeps it: one of other data is passed over
    (:func:`clusterbench.training.checkpoints.data_problem`)."""
    import hashlib

    from clusterbench.config import canonical_json

    named = meta.get("files") or meta
    return hashlib.sha256(canonical_json(named).encode()).hexdigest()[:16]


def check(data_dir: Path, run: Mapping[str, Any]) -> dict[str, Any]:
    """The data's ``meta.json``, checked for ``run`` before any backend starts (the arrays'
    shapes, an image folder's index and input size); the arrays themselves are read later."""
    meta = read_meta(data_dir)
    if meta.get("dataset") != run["dataset"]:
        raise ValueError(
            f"{data_dir / 'meta.json'}: dataset {meta.get('dataset')!r}, but run.dataset="
            f"{run['dataset']!r}"
        )
    if storage_of(meta) == "synthetic":
        shape_of(meta, run["model"])  # no array: what the device will generate
    elif is_text(meta):
        from clusterbench.data.tokens import load_tokens

        for split in ("train", "val"):
            load_tokens(data_dir, split)
    elif storage_of(meta) == "files":
        from clusterbench.data.folder import input_size, read_index

        read_index(data_dir, meta)
        input_size(meta, model_input_size(run), run["model"])
    else:
        from clusterbench.data.arrays import check_mapped

        check_mapped(data_dir, meta, ("train", "val"))
    if meta["counts"]["train"] < run["workers"]:
        raise ValueError(
            f"{data_dir}: {meta['counts']['train']} training samples cannot feed "
            f"workers={run['workers']}"
        )
    return meta


def is_text(meta: Mapping[str, Any]) -> bool:
    """Whether ``meta.json`` describes a text's token windows (stored as arrays)."""
    return meta.get("task") == "language-model" and not meta.get("synthetic")


def shape_of(meta: Mapping[str, Any], model: str) -> list[int]:
    """The input shape of synthetic data: its own (``shape``, ``seq_len``), else the model's
    (:func:`clusterbench.config.model_data.input_shape`)."""
    from clusterbench.config.model_data import input_shape as model_input_shape
    from clusterbench.models import resolve

    task = meta.get("task", "classification")
    if task == "language-model":
        given = None if meta.get("seq_len") is None else [meta["seq_len"]]
    else:
        given = meta.get("shape")
    shape = model_input_shape(task, given, resolve(model))
    if shape is None:
        raise ValueError(
            f"dataset {meta.get('dataset')!r} is synthetic without a shape, and model {model!r} "
            "has no input size of its own"
        )
    return shape


def model_input_size(run: Mapping[str, Any]) -> tuple[int, int] | None:
    from clusterbench.models import resolve

    return resolve(run["model"]).input_size


def decide(meta: Mapping[str, Any], reading: Reading, device: Any) -> loading.Decision:
    """Resident or stream, for this node (:mod:`clusterbench.data.loading`)."""
    storage = storage_of(meta)
    data_bytes = loading.resident_bytes(meta) if storage == "arrays" else 0
    return loading.decide(
        reading.settings["loading"],
        storage,
        data_bytes,
        reading.local_ranks,
        loading.node_memory(),
        RESIDENT_MEMORY_FRACTION,
        loading.gpu_memory(device),
    )


def open_source(data_dir: Path, run: Mapping[str, Any], reading: Reading, device: Any) -> Any:
    """The data source of ``run`` on ``device`` (module docstring's table)."""
    meta = read_meta(data_dir)
    storage = storage_of(meta)
    if storage == "synthetic" or is_text(meta):
        return resident_tokens_or_synthetic(data_dir, meta, run, reading, device)
    augment = augmentation.effective(run["augment"], storage)
    decision = decide(meta, reading, device)
    workers = loading.loader_workers(reading.settings["loader_workers"], reading.rank_cpus)
    settings = {
        "seed": run["seed"],
        "augment": augment,
        "on_bad_file": run["on_bad_file"],
        "loader_workers": workers,
    }
    if decision.loading == "resident":
        check_resident(meta, run, reading, device)
        from clusterbench.data.arrays import load_training
        from clusterbench.data.resident import ResidentImages

        source: Any = ResidentImages(load_training(data_dir, run), device, run["seed"], augment)
    elif storage == "arrays":
        source = streamed_arrays(data_dir, meta, device, settings)
    else:
        source = streamed_files(data_dir, meta, run, device, settings)
    source.facts = {
        "storage": storage,
        "loading": decision.as_dict(reading.settings["loading"]),
        **({"staging": reading.staging} if reading.staging else {}),
    }
    return source


def resident_tokens_or_synthetic(
    data_dir: Path, meta: Mapping[str, Any], run: Mapping[str, Any], reading: Reading, device: Any
) -> Any:
    """A text's token windows, or synthetic images or tokens: resident whatever ``loading``
    says (a text's bytes are small; synthetic data is generated on the device)."""
    storage = storage_of(meta)
    check_resident(meta, run, reading, device)
    if storage == "synthetic":
        source = synthetic_source(meta, run, device)
        why = "synthetic data is generated on the training device"
    else:
        from clusterbench.data.tokens import ResidentTokens, load_tokens

        train, val = load_tokens(data_dir, "train"), load_tokens(data_dir, "val")
        source = ResidentTokens.from_splits(train, val, device, run["seed"])
        why = "a text's token windows are held in memory"
    decision = loading.Decision("resident", why)
    source.facts = {
        "storage": storage,
        "loading": decision.as_dict(reading.settings["loading"]),
        **({"staging": reading.staging} if reading.staging else {}),
    }
    return source


def check_resident(
    meta: Mapping[str, Any], run: Mapping[str, Any], reading: Reading, device: Any
) -> None:
    """Stop before holding data that cannot fit in this node's memory (its ranks' copies) or
    the GPU's (:func:`clusterbench.data.loading.check_fits`): synthetic data, a text's token
    windows, arrays held resident by ``loading: resident``."""
    from clusterbench.config.memory import sample_bytes

    counts = meta["counts"]
    held = int(counts["train"]) + int(counts["val"])
    name = f"the data of run {run.get('name')!r} (dataset {meta.get('dataset')!r}"
    if storage_of(meta) == "synthetic":
        shape = shape_of(meta, run["model"])
        task = meta.get("task", "classification")
        key = "seq_len" if task == "language-model" else "shape"
        what = f"{name}, synthetic: {held} training and validation samples x {key} {shape}"
        data_bytes = held * sample_bytes(task, shape)
    elif is_text(meta):
        what = f"{name}: {held} token windows of seq_len {meta['seq_len']}"
        data_bytes = held * 2 * int(meta["seq_len"])
    else:
        what = f"{name}, held resident by loading: {reading.settings['loading']}"
        data_bytes = loading.resident_bytes(meta)
    memory = loading.node_memory()
    what += ")"
    loading.check_fits(what, data_bytes, reading.local_ranks, memory, loading.gpu_memory(device))


def synthetic_source(meta: Mapping[str, Any], run: Mapping[str, Any], device: Any) -> Any:
    """Synthetic data generated on ``device``, the same on every rank."""
    from clusterbench.data import synthetic
    from clusterbench.data.tokens import ResidentTokens

    shape = shape_of(meta, run["model"])
    counts, seed = synthetic.split_counts(meta), int(meta["seed"])
    if meta.get("task") == "language-model":
        (seq_len,) = shape
        train = synthetic.sequences(seed, "train", counts["train"], seq_len, device)
        val = synthetic.sequences(seed, "val", counts["val"], seq_len, device)
        return ResidentTokens(train, val, meta["vocabulary"], run["seed"])
    augment = augmentation.effective(run.get("augment", "auto"), "synthetic")
    return synthetic.SyntheticImages(meta, shape, device, run["seed"], augment)


def normalisation(meta: Mapping[str, Any]) -> dict[str, list[float]]:
    return {"mean": [float(m) for m in meta["mean"]], "std": [float(s) for s in meta["std"]]}


def streamed_arrays(data_dir: Path, meta: Mapping[str, Any], device: Any, settings: dict) -> Any:
    """Preprocessed arrays streamed, memory-mapped (their headers checked here)."""
    from clusterbench.data.arrays import check_mapped
    from clusterbench.data.stream import ArrayReader, StreamedImages

    check_mapped(data_dir, meta, ("train", "val"))
    info = {
        "train_size": meta["counts"]["train"],
        "num_classes": meta["num_classes"],
        "input_shape": input_shape(meta["image_shape"]),
        "normalisation": normalisation(meta),
        "storage": "arrays",
    }
    return StreamedImages(ArrayReader(data_dir, meta["counts"]), info, device, settings)


def streamed_files(
    data_dir: Path, meta: Mapping[str, Any], run: Mapping[str, Any], device: Any, settings: dict
) -> Any:
    """An image folder stored as files, decoded per batch at the input size."""
    from clusterbench.data import device_decode
    from clusterbench.data.folder import FileReader, Sources, input_size, read_index
    from clusterbench.data.stream import StreamedImages

    index = read_index(data_dir, meta)
    size = input_size(meta, model_input_size(run), run["model"])
    channels = int(meta["channels"])
    sources = Sources(data_dir, index)
    reader = FileReader(sources, index, size, channels, settings["augment"], run["seed"])
    decoded = device_decode.choose(run.get("decode", "auto"), device.type)
    info = {
        "train_size": meta["counts"]["train"],
        "num_classes": meta["num_classes"],
        "input_shape": [channels, *size],
        "normalisation": {**normalisation(meta), "input": eval_input(settings)},
        "storage": "files",
        "eval_batch": 256,
    }
    if decoded[0] == "cpu":
        source = StreamedImages(reader, info, device, settings, name_bad=sources.describe)
    else:  # the loader processes read bytes, the device decodes and augments them
        decoder = device_decode.DeviceDecoder(reader, device)
        source = StreamedImages(
            device_decode.ByteReader(reader), info, device, settings, sources.describe, decoder
        )
    source.decoded = decoded
    return source


def eval_input(settings: Mapping[str, Any]) -> dict[str, str]:
    """What ``model.pt`` records for evaluating an image folder stored as files: how its test
    images are made the input (a centre crop under augment: standard, else resized), and
    whether an unreadable one stops the evaluation."""
    return {"augment": settings["augment"], "on_bad_file": settings["on_bad_file"]}
