"""Whether a run's model fits its dataset: a language model trains on token sequences, a
classification model on images, and each takes only some shapes (3 channels for torchvision's,
a sequence no longer than a GPT's context). Checked before any job (:func:`run_problems`, by
:func:`clusterbench.config.validate`) for every dataset whose shape the config tells (the
built-in ones, synthetic data, text); the model is built for the data's shape when the run
starts.

Synthetic data without a ``shape`` (``seq_len``) of its own takes the model's
(:func:`input_shape`): 3 channels at ``ModelSpec.input_size``, or ``ModelSpec.context`` tokens.

Standard library only (the Snakefile imports clusterbench.config, which imports this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clusterbench.config.datasets import DATASETS as BUILTIN_DATASETS
from clusterbench.formats import FORMATS, is_synthetic, task_of
from clusterbench.models import ModelError, ModelSpec, fit_problems, resolve

#: The data each task trains on, in words.
DATA = {"classification": "images", "language-model": "token sequences"}


def dataset_input(name: str, ds: Mapping[str, Any]) -> tuple[str, list[int] | None]:
    """What dataset ``name`` (its resolved config entry) trains: its task and the network's
    input shape, ``[C, H, W]`` or ``[T]``; None where the config does not tell (known once its
    files are read, or synthetic data that takes the model's). An image folder resized to its
    ``image_size`` has a known side, but channels known only once its images are read:
    ``[None, H, W]``."""
    if name in BUILTIN_DATASETS:
        height, width, channels = BUILTIN_DATASETS[name].image_shape
        return "classification", [channels, height, width]
    fmt = ds.get("format")
    if fmt not in FORMATS:
        return "classification", None
    task = task_of(fmt)
    if task == "classification" and "image_size" in ds and "shape" not in ds:
        return task, [None, *ds["image_size"]]
    key = "seq_len" if task == "language-model" else "shape"
    if key not in ds:
        return task, None
    return task, [ds[key]] if key == "seq_len" else list(ds[key])


def input_shape(task: str, given: Sequence[int] | None, spec: ModelSpec) -> list[int] | None:
    """The input shape of synthetic data: its own (``given``), else the model's (None: the
    model has none)."""
    if given is not None:
        return list(given)
    if task == "language-model":
        return None if spec.context is None else [spec.context]
    return None if spec.input_size is None else [3, *spec.input_size]


def run_problems(run: Mapping[str, Any], where: str, datasets: Mapping[str, Any]) -> list[str]:
    """Why run ``run`` (at ``where``: ``runs[0]``) cannot train its model on its dataset, each
    naming the keys; nothing for an undeclared dataset or an unknown model (named elsewhere)."""
    name, model = run["dataset"], run["model"]
    ds = datasets.get(name)
    try:
        spec = resolve(model)
    except ModelError:
        return []
    if ds is None:
        return []
    task, shape = dataset_input(name, ds)
    synthetic = name not in BUILTIN_DATASETS and ds.get("format") in FORMATS
    synthetic = synthetic and is_synthetic(ds["format"])
    if synthetic and shape is None and spec.task == task:
        shape = input_shape(task, None, spec)
        if shape is None:
            key, what = (
                ("seq_len", "context") if task == "language-model" else ("shape", "input size")
            )
            return [
                f"datasets.{name}.{key}: synthetic data without {key} takes the model's own "
                f"{what}, and {where}.model {model!r} has none: give {key}"
            ]
    return [
        f"{where}.model: {problem} ({where}.dataset: {name!r})"
        for problem in fit_problems(model, task, shape)
    ]


def synthetic_input(
    name: str, ds: Mapping[str, Any] | None, model: str
) -> tuple[str, list[int]] | None:
    """The task and input shape of synthetic dataset ``name`` (its resolved entry ``ds``) as
    ``model`` trains on it (its own shape, else the model's); None for other data, an unknown
    model or a shape neither gives."""
    if ds is None or name in BUILTIN_DATASETS or ds.get("format") not in FORMATS:
        return None
    if not is_synthetic(ds["format"]):
        return None
    try:
        spec = resolve(model)
    except ModelError:
        return None
    task, given = dataset_input(name, ds)
    shape = input_shape(task, given, spec)
    return None if shape is None else (task, shape)
