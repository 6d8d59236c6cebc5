"""Resident or streamed: how a run's ranks read its data (the run key ``loading``).

``resident`` and ``stream`` give every rank the same samples in the same order (the epoch's
permutation, the rank's share of each global batch: :mod:`clusterbench.training.schedule`), so
they train the same weights; they differ in memory and in time. ``auto`` decides on each node,
when the run starts: resident when the copies of the training and validation data its ranks
would hold (every rank holds them whole) fit in a share
(:data:`~clusterbench.config.RESIDENT_MEMORY_FRACTION`, the schema's
``x-resident-memory-fraction`` of ``loading``) of the memory this job may use (the node's, or
its cgroup's limit where lower) and, training on a GPU, of that GPU's memory; else stream. A
dataset stored as image files always streams.

The decision and its reason go into ``run.json`` (``data.loading``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.config.memory import size_text

#: A cgroup memory limit this large is no limit (cgroup v1 writes 2**63 rounded to pages).
_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class Decision:
    """``loading``: resident or stream; ``reason``: why, in a sentence."""

    loading: str
    reason: str

    def as_dict(self, setting: str) -> dict[str, str]:
        return {"setting": setting, "decision": self.loading, "reason": self.reason}


#: Bytes as a short text (``1.4 GiB``): the config's one formatter.
gib = size_text


def resident_bytes(meta: Mapping[str, Any]) -> int:
    """What one rank holds of a dataset stored as arrays: its training and validation images
    (uint8) and labels (int64), from ``meta.json``'s ``counts`` and ``image_shape``."""
    per_image = math.prod(meta["image_shape"])
    return sum(meta["counts"][split] * (per_image + 8) for split in ("train", "val"))


def decide(
    setting: str,
    storage: str,
    data_bytes: int,
    local_ranks: int,
    memory: tuple[int, str],
    fraction: float,
    gpu_memory: int | None = None,
) -> Decision:
    """How to load: ``setting`` (auto, resident, stream) for data stored as ``storage`` of
    ``data_bytes`` per rank, ``local_ranks`` of them on this node with ``memory`` (bytes, where
    it comes from) and, on a GPU, ``gpu_memory`` bytes each (module docstring)."""
    if storage == "files":
        return Decision("stream", "stored as image files, which the loader decodes per batch")
    if setting != "auto":
        return Decision(setting, f"loading: {setting} in the run's settings")
    need = data_bytes * local_ranks
    limit, where = memory
    share = f"{fraction:.0%}"
    held = f"{gib(data_bytes)} of training and validation data x {local_ranks} rank(s)"
    if need > fraction * limit:
        return Decision(
            "stream", f"auto: {held} = {gib(need)} exceed {share} of {gib(limit)} ({where})"
        )
    if gpu_memory is not None and data_bytes > fraction * gpu_memory:
        return Decision(
            "stream",
            f"auto: {gib(data_bytes)} of data exceed {share} of the GPU's {gib(gpu_memory)}",
        )
    return Decision(
        "resident", f"auto: {held} = {gib(need)} fit in {share} of {gib(limit)} ({where})"
    )


def check_fits(
    what: str,
    data_bytes: int,
    local_ranks: int,
    memory: tuple[int, str],
    gpu_memory: int | None = None,
    remedy: str = "lower the samples or the shape, or run fewer ranks per node",
) -> None:
    """Stop before allocating data that cannot be held: ``data_bytes`` per rank (``what``:
    the keys and figures that make it), on the CPU ``local_ranks`` times over this node's
    ``memory`` (bytes, where it comes from), on a GPU its ``gpu_memory`` bytes. The data alone:
    the model, the framework and the batches come on top."""
    from clusterbench.data import DataError

    limit, where = memory
    if gpu_memory is not None:
        if data_bytes > gpu_memory:
            raise DataError(
                f"{what} is {gib(data_bytes)} per rank, held on its GPU, which has "
                f"{gib(gpu_memory)}: it cannot fit; {remedy}"
            )
        return
    need = data_bytes * local_ranks
    if need > limit:
        raise DataError(
            f"{what} is {gib(data_bytes)} per rank x {local_ranks} rank(s) on this node = "
            f"{gib(need)}, more than the {gib(limit)} this job may use ({where}): it cannot "
            f"fit; {remedy}"
        )


def gpu_memory(device: Any) -> int | None:
    """The memory of ``device``'s GPU, bytes; None on the CPU."""
    if device.type != "cuda":
        return None
    import torch

    return torch.cuda.get_device_properties(device).total_memory


def node_memory(root: Path = Path("/")) -> tuple[int, str]:
    """The memory this process's job may use, in bytes, and what limits it: the node's
    (``MemTotal``), or its cgroup's limit where lower (a Slurm job's ``--mem``)."""
    total = _meminfo_total(root / "proc" / "meminfo")
    if total is None:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = cgroup_limit(root)
    if limit is not None and limit < total:
        return limit, "the job's cgroup memory limit"
    return total, "the node's memory"


def _meminfo_total(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_limit(root: Path = Path("/")) -> int | None:
    """This process's cgroup memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``),
    None where there is none or it cannot be read."""
    try:
        lines = (root / "proc" / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        path = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            candidates.append(root / "sys" / "fs" / "cgroup" / path / "memory.max")
        elif "memory" in controllers.split(","):
            base = root / "sys" / "fs" / "cgroup" / "memory"
            candidates.append(base / path / "memory.limit_in_bytes")
    for file in candidates:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_LIMIT:
            return int(text)
    return None


def loader_workers(setting: int | None, rank_cpus: int) -> int:
    """DataLoader worker processes of a streamed rank: ``loader_workers``, or (null) the rank's
    CPUs less one (the training's own thread), 1 to 8."""
    if setting is not None:
        return setting
    return max(1, min(8, rank_cpus - 1))
