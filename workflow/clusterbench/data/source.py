"""A run's data source, chosen by what ``meta.json`` describes: preprocessed images
(:class:`~clusterbench.data.resident.ResidentImages`), a text's token windows
(:class:`~clusterbench.data.tokens.ResidentTokens`), or synthetic images or tokens generated
on the device (:mod:`clusterbench.data.synthetic`).

:func:`prepare` reads and checks what it can before any backend starts (``meta.json``, the
arrays); the source itself is made on the training device (``make(device)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clusterbench.params import read_json_object

#: ``make(device)``: the data source on the training device.
MakeData = Callable[[Any], Any]


def shape_of(meta: Mapping[str, Any], model: str) -> list[int]:
    """The input shape of synthetic data: its own (``shape``, ``seq_len``), else the model's
    (:func:`clusterbench.model_data.input_shape`)."""
    from clusterbench.model_data import input_shape
    from clusterbench.models import resolve

    task = meta.get("task", "classification")
    if task == "language-model":
        given = None if meta.get("seq_len") is None else [meta["seq_len"]]
    else:
        given = meta.get("shape")
    shape = input_shape(task, given, resolve(model))
    if shape is None:
        raise ValueError(
            f"dataset {meta.get('dataset')!r} is synthetic without a shape, and model {model!r} "
            "has no input size of its own"
        )
    return shape


def prepare(data_dir: Path, run: Mapping[str, Any]) -> MakeData:
    """Read and check the run's data in ``data_dir``; returns ``make(device)``."""
    from clusterbench.data.tokens import check_dataset

    where = data_dir / "meta.json"
    meta = read_json_object(where, f"is {data_dir} a preprocessed data dir?")
    task = meta.get("task", "classification")
    if meta.get("synthetic"):
        check_dataset(meta, where, run)
        return synthetic_maker(meta, run)
    if task == "language-model":
        from clusterbench.data.tokens import ResidentTokens, load_tokens

        train, val = load_tokens(data_dir, "train"), load_tokens(data_dir, "val")
        check_dataset(train.meta, where, run)
        return lambda device: ResidentTokens.from_splits(train, val, device, run["seed"])
    from clusterbench.data.arrays import load_training
    from clusterbench.data.resident import ResidentImages

    splits = load_training(data_dir, run)
    return lambda device: ResidentImages(splits, device, run["seed"])


def synthetic_maker(meta: Mapping[str, Any], run: Mapping[str, Any]) -> MakeData:
    """``make(device)`` of synthetic data: generated there, the same on every rank."""
    from clusterbench.data import synthetic
    from clusterbench.data.tokens import ResidentTokens

    shape = shape_of(meta, run["model"])
    counts, seed = synthetic.split_counts(meta), int(meta["seed"])

    def make(device: Any) -> Any:
        if meta.get("task") == "language-model":
            (seq_len,) = shape
            train = synthetic.sequences(seed, "train", counts["train"], seq_len, device)
            val = synthetic.sequences(seed, "val", counts["val"], seq_len, device)
            return ResidentTokens(train, val, meta["vocabulary"], run["seed"])
        return synthetic.SyntheticImages(meta, shape, device, run["seed"])

    return make
