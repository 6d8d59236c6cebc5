"""Token sequences for language models: a text dataset's preprocessed windows
(``{split}_x.npy`` inputs and ``{split}_y.npy`` next-token targets, uint8 ``(N, T)``, checked
against ``meta.json`` and its checksums) or synthetic ones, resident on the training device
and served as the training loop asks (:mod:`clusterbench.data.resident` says what a data
source provides)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.core.params import read_json_object
from clusterbench.data.arrays import checked_arrays
from clusterbench.data.order import epoch_permutation, shard_bounds

#: Sequences per validation batch (per rank): inference only.
EVAL_SEQUENCES = 64


@dataclass(frozen=True)
class TokenSplit:
    x: np.ndarray  # uint8 (N, T): inputs
    y: np.ndarray  # uint8 (N, T): next tokens
    meta: dict[str, Any]


def load_tokens(data_dir: Path, split: str) -> TokenSplit:
    """``{split}_x.npy`` and ``{split}_y.npy`` of a preprocessed text dataset, checked against
    ``meta.json`` (shape, dtype, its checksums: a damaged array is named with the command that
    makes it again)."""
    meta_path = data_dir / "meta.json"
    meta = read_json_object(meta_path, f"is {data_dir} a preprocessed data dir?")
    missing = [k for k in ("seq_len", "vocabulary", "counts") if k not in meta]
    if missing:
        raise ValueError(f"{meta_path}: missing field(s) {missing}")
    arrays = checked_arrays(data_dir, split, meta_path)
    for part in ("x", "y"):
        path, a, seq_len = data_dir / f"{split}_{part}.npy", arrays[part], meta["seq_len"]
        if a.dtype != np.uint8 or a.ndim != 2 or a.shape[1] != seq_len or len(a) == 0:
            raise ValueError(
                f"{path}: {a.dtype} {a.shape}, expected uint8 (N >= 1, {seq_len}) from "
                "meta.json seq_len"
            )
    if len(arrays["x"]) != len(arrays["y"]):
        raise ValueError(f"{data_dir}: {split}_x.npy and {split}_y.npy differ in length")
    return TokenSplit(arrays["x"], arrays["y"], meta)


class ResidentTokens:
    """Token sequences and their next tokens, resident on ``device`` as uint8; each batch goes
    to the network as int64 ``[n, T]`` ids and int64 targets."""

    task = "language-model"

    def __init__(
        self, train: tuple[Any, Any], val: tuple[Any, Any], vocabulary: int, seed: int
    ) -> None:
        self.train_x, self.train_y = train
        self.val_x, self.val_y = val
        self.seed = seed
        self.device = self.train_x.device
        self.num_classes = int(vocabulary)
        #: Units a sample counts for in the loss and throughput: its tokens.
        self.units_per_sample = int(self.train_x.shape[1])
        self.input_shape = [self.units_per_sample]
        self.normalisation: dict[str, Any] = {"vocabulary": self.num_classes}

    @classmethod
    def from_splits(cls, train: TokenSplit, val: TokenSplit, device: Any, seed: int):
        import torch

        def tensor(a: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        return cls(
            (tensor(train.x), tensor(train.y)),
            (tensor(val.x), tensor(val.y)),
            train.meta["vocabulary"],
            seed,
        )

    @property
    def train_size(self) -> int:
        return len(self.train_x)

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

        order = torch.from_numpy(epoch_permutation(self.train_size, self.seed, epoch))
        order = order.to(self.device)
        for start, stop in batches[first:]:
            lo, hi = shard_bounds(stop - start, size, rank, shares)
            idx = order[start + lo : start + hi]
            yield self.train_x[idx].long(), self.train_y[idx].long()

    def val_batches(self, rank: int, size: int) -> Iterator[tuple[Any, Any]]:
        lo, hi = shard_bounds(len(self.val_x), size, rank)
        for start in range(lo, hi, EVAL_SEQUENCES):
            stop = min(start + EVAL_SEQUENCES, hi)
            yield self.val_x[start:stop].long(), self.val_y[start:stop].long()
