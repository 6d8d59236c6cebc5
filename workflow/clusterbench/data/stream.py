"""A run's data streamed from disk (``loading: stream``): each rank reads only its share of
each global batch, through a ``torch.utils.data.DataLoader`` with worker processes.

* **The same batches as resident.** The training process computes the epoch's permutation and
  the rank's share of each global batch exactly as :mod:`clusterbench.data.resident` does
  (:func:`~clusterbench.data.order.epoch_permutation`,
  :func:`~clusterbench.data.order.shard_bounds`); the loader processes only read the
  samples it names, in that order. Arrays augmented (``augment: standard``) are cropped and
  flipped on the device by the same function as resident ones: a resident and a streamed run
  train the same weights.
* **Readers.** Preprocessed arrays are memory-mapped (``np.load(mmap_mode="r")``) in each loader
  process (:class:`ArrayReader`); an image folder stored as files is decoded per image
  (:class:`clusterbench.data.folder.FileReader`).
* **Workers.** ``loader_workers`` processes (0: the training process reads), started once for
  the run (``persistent_workers``: no start-up per epoch), each keeping :data:`PREFETCH`
  batches ready; on a GPU the batches come in pinned memory and are copied asynchronously.
* **Resume and elastic resets.** Each call of :meth:`StreamedImages.epoch_batches` starts a new
  pass of the loader from the given step (a run continued mid-epoch starts at its step; an
  elastic run's reset asks again at the new world size); batches prefetched for an abandoned
  pass are dropped by the loader.
* **Ending.** :meth:`StreamedImages.close` (the train stage calls it on every way out:
  finished, failed, preempted) closes the passes still open and ends the loader processes; a
  loader process whose training process died ends on its own (the DataLoader's watchdog).
* **Bad files.** An image that cannot be read stops the run naming its file (``on_bad_file:
  fail``), or is left out of its batch and counted (``skip``).
* **Data wait.** The training loop's step-time breakdown times the wait for each batch (its
  ``data`` phase, :mod:`clusterbench.training.step_times`); the report's data page shows its
  share of the step time.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.data import DataError
from clusterbench.data import augment as augmentation
from clusterbench.data.images import normalize_images
from clusterbench.data.order import epoch_permutation, shard_bounds

#: Batches each loader process keeps ready.
PREFETCH = 4


class ArrayReader:
    """Reads preprocessed arrays by index, memory-mapped in the process that reads them (the
    maps are not sent to loader processes: each opens its own)."""

    def __init__(self, data_dir: Path, counts: dict[str, int]) -> None:
        self.data_dir = Path(data_dir)
        self.counts = dict(counts)
        self._open: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": {}}

    def count(self, split: str) -> int:
        return self.counts[split]

    def arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        if split not in self._open:
            x = np.load(self.data_dir / f"{split}_x.npy", mmap_mode="r", allow_pickle=False)
            y = np.load(self.data_dir / f"{split}_y.npy", allow_pickle=False).astype(np.int64)
            self._open[split] = (x, y)
        return self._open[split]

    def read(self, split: str, epoch: int | None, idx: np.ndarray) -> tuple[Any, Any, Any, list]:
        import torch

        x, y = self.arrays(split)
        return torch.from_numpy(x[idx]), torch.from_numpy(y[idx]), torch.from_numpy(idx), []


class Reads:
    """The loader's dataset: item ``(split, epoch, indices)`` -> the reader's batch."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def __getitem__(self, item: tuple[str, int | None, np.ndarray]) -> Any:
        return self.reader.read(*item)


class Items:
    """The loader's sampler: the items of the current pass, set before each pass."""

    def __init__(self) -> None:
        self.items: list[tuple[str, int | None, np.ndarray]] = []

    def __iter__(self) -> Iterator[tuple[str, int | None, np.ndarray]]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class StreamedImages:
    """A data source (:mod:`clusterbench.data.resident` lists what the loop asks) reading
    through ``reader`` (module docstring). ``info``: ``train_size``, ``num_classes``,
    ``input_shape``, ``normalisation`` (``mean``, ``std`` and what ``model.pt`` records
    beside), ``storage``; ``name_bad(row)`` names a file the reader could not read."""

    task = "classification"
    units_per_sample = 1

    def __init__(
        self,
        reader: Any,
        info: dict[str, Any],
        device: Any,
        settings: dict[str, Any],
        name_bad: Callable[[int], str] = str,
        decoder: Callable[..., Any] | None = None,
    ) -> None:
        import torch

        self.reader, self.device, self.name_bad = reader, device, name_bad
        #: Decodes a batch of the reader's items on the device (decode: gpu); None: the reader
        #: gives pixels (:mod:`clusterbench.data.device_decode`).
        self.decoder = decoder
        self.decoded = ("cpu", "decode: cpu")  # where, and why (run.json's data)
        self.train_size = int(info["train_size"])
        self.num_classes = int(info["num_classes"])
        self.input_shape = list(info["input_shape"])
        self.normalisation = dict(info["normalisation"])
        self.storage = info["storage"]
        self.eval_batch = int(info.get("eval_batch", 1024))
        self.mean = torch.tensor(self.normalisation["mean"], dtype=torch.float32, device=device)
        self.std = torch.tensor(self.normalisation["std"], dtype=torch.float32, device=device)
        self.seed = settings["seed"]
        self.augment, self.on_bad_file = settings["augment"], settings["on_bad_file"]
        self.workers = int(settings["loader_workers"])
        self.skipped: dict[str, str] = {}
        self._live: weakref.WeakSet = weakref.WeakSet()
        self.loader: Any = None
        self.items = Items()

    def make_loader(self) -> Any:
        """The run's DataLoader, made at its first pass (its processes live until close)."""
        from torch.utils.data import DataLoader

        kwargs: dict[str, Any] = {}
        if self.workers > 0:
            kwargs = {"persistent_workers": True, "prefetch_factor": PREFETCH}
        return DataLoader(
            Reads(self.reader),
            batch_size=None,
            sampler=self.items,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            **kwargs,
        )

    def epoch_batches(
        self,
        epoch: int,
        batches: list[tuple[int, int]],
        first: int,
        rank: int,
        size: int,
        shares: list[float] | None = None,
    ) -> Iterator[tuple[Any, Any]]:
        import torch

        order = epoch_permutation(self.train_size, self.seed, epoch)
        items = []
        for start, stop in batches[first:]:
            lo, hi = shard_bounds(stop - start, size, rank, shares)
            items.append(("train", epoch, order[start + lo : start + hi]))
        table = None
        if self.augment == "standard" and self.storage == "arrays":
            table = augmentation.crop_flip_table(self.train_size, self.seed, epoch)
            table = torch.from_numpy(table).to(self.device)
        return self.track(self.passes(items, table))

    def val_batches(self, rank: int, size: int) -> Iterator[tuple[Any, Any]]:
        lo, hi = shard_bounds(self.reader.count("val"), size, rank)
        items = [
            ("val", None, np.arange(start, min(start + self.eval_batch, hi)))
            for start in range(lo, hi, self.eval_batch)
        ]
        return self.track(self.passes(items, None))

    def track(self, batches: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        self._live.add(batches)
        return batches

    def passes(self, items: list, table: Any) -> Iterator[tuple[Any, Any]]:
        """One pass of the loader over ``items``: each batch on the device, as the network takes
        it (a generator: the pass starts at its first ``next``)."""
        if self.loader is None:
            self.loader = self.make_loader()
        self.items.items = items
        batches = iter(self.loader)
        while True:
            try:
                x, y, idx, bad = next(batches)
            except StopIteration:
                return
            if self.decoder is not None:  # the reader's items decoded on the device
                x, y, idx, more = self.decoder(x, y, idx)
                bad = [*bad, *more]
            self.bad_files(bad, len(y))
            x = x.to(self.device, non_blocking=True)
            if table is not None:
                x = augmentation.crop_flip(x, table[idx.to(self.device)])
            yield normalize_images(x, self.mean, self.std), y.to(self.device)

    def bad_files(self, bad: list[tuple[int, str]], kept: int) -> None:
        """Stop naming the first unreadable file (``on_bad_file: fail``), or count it (skip)."""
        for row, reason in bad:
            name = self.name_bad(row)
            if self.on_bad_file == "fail":
                raise DataError(
                    f"{name} is not a readable image ({reason}); on_bad_file: skip leaves such "
                    "files out of their batches (counted in run.json)"
                )
            if name not in self.skipped:
                print(f"train: skipping {name}: not a readable image ({reason})", flush=True)
            self.skipped[name] = reason
        if bad and kept == 0:
            raise DataError(
                f"every image of a batch of this rank is unreadable ({len(bad)}, e.g. "
                f"{self.name_bad(bad[0][0])}): nothing to train on"
            )

    def describe(self) -> dict[str, Any]:
        """This rank's facts for ``run.json``'s ``data`` (:mod:`clusterbench.data.source`)."""
        return {
            "source": "stream",
            "augment": self.augment,
            **(
                {"decode": self.decoded[0], "decode_reason": self.decoded[1]}
                if self.storage == "files"
                else {}
            ),
            "loader_workers": self.workers,
            "skipped": dict(sorted(self.skipped.items())),
        }

    def close(self) -> None:
        """Close the passes still open and end the loader processes (every way out)."""
        for batches in list(self._live):
            batches.close()
        self._live = weakref.WeakSet()
        self.loader = None
