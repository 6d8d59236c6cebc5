"""What a run's data and a comm job's buffers hold in memory where the config tells it, and
whether that fits: one formula for the check before any job and for the job's own check on
its node, before it allocates.

Synthetic data is held by every rank, whatever ``loading`` says: its training and validation
splits (uint8 pixels and an int64 label per image; a token sequence and its next tokens share
one uint8 buffer of ``seq_len + 1``), generated on the training device (host memory on the CPU,
the GPU's on a GPU). A comm job's rank holds an allgather's input and output: up to twice
``comm.max_bytes``.

Before any job (:func:`run_problems`, by :func:`clusterbench.config.validate`): a CPU run whose
ranks' data exceeds its job's memory (``mem_mb``) is refused, naming the keys and the sizes.
On its node, the train and comm stages compare the same figures with the memory the job may use
(the node's, or its cgroup's limit; a GPU's) before allocating anything.

Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Bytes of an image's label (int64).
LABEL_BYTES = 8


def size_text(n: float) -> str:
    """Bytes as a short text: ``1.4 GiB``, ``312.0 MiB``, ``48.0 KiB``, ``2.0 TiB``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def sample_bytes(task: str, shape: Sequence[int]) -> int:
    """What one sample of synthetic data of ``task`` and input ``shape`` holds: an image's
    pixels and label, or a sequence's ``seq_len + 1`` tokens."""
    if task == "language-model":
        return int(shape[0]) + 1
    return math.prod(int(s) for s in shape) + LABEL_BYTES


def held_samples(samples: int, test_fraction: float) -> int:
    """The training and validation samples of ``samples``: all but the test split, rounded
    as preprocessing rounds it (:func:`clusterbench.config.problems.split_sizes`)."""
    return samples - round(test_fraction * samples)


def describe(name: str, ds: Mapping[str, Any], shape: Sequence[int], task: str) -> str:
    """``datasets.fake.samples 1000000 x shape [3, 32, 32]``: the keys that make the size."""
    key = "seq_len" if task == "language-model" else "shape"
    given = ds.get(key)
    what = f"{key} {list(shape) if key == 'shape' else shape[0]}"
    if given is None:
        what += " (the model's)"
    return f"datasets.{name}.samples {ds['samples']} x {what}"


def run_problems(
    run: Mapping[str, Any],
    where: str,
    ds: Mapping[str, Any] | None,
    shape: Sequence[int] | None,
    task: str,
    ranks: int,
) -> list[str]:
    """Why ``run`` (at ``where``) cannot hold its synthetic data (``ds``, its config entry, of
    input ``shape``) in its job's memory (``mem_mb``) on the CPU: ``ranks`` ranks each hold its
    training and validation splits. Nothing on a GPU (the data is generated there: its memory
    is checked on the node) or where the size is unknown."""
    if ds is None or shape is None or run["gpus_per_node"] or "samples" not in ds:
        return []
    per_rank = held_samples(ds["samples"], ds["test_fraction"]) * sample_bytes(task, shape)
    need, limit = per_rank * ranks, run["mem_mb"] * 2**20
    if need <= limit:  # the data alone: the model, the framework and the batches come on top
        return []
    return [
        f"{where}.mem_mb: the run's data cannot fit in its job's memory: "
        f"{describe(run['dataset'], ds, shape, task)} is {size_text(per_rank)} of training and "
        f"validation data held by each of its {ranks} rank(s) (synthetic data is generated "
        f"whole on every rank), {size_text(need)} in all, more than mem_mb {run['mem_mb']} "
        f"({size_text(limit)}); lower datasets.{run['dataset']}.samples or its shape, or raise "
        "mem_mb (if the nodes have the memory)"
    ]
