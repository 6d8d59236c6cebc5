"""Which samples each rank reads, pure: the order of the samples in an epoch and each rank's
share of a global batch. Every data source (resident, streamed, tokens) and the training loop
read the same batches from it, whatever the storage.

* A global batch is split over the workers, the remainder going to the first ranks
  (:func:`shard_sizes`), or by each worker's share (a run's ``shares``: one sample each, the
  rest in proportion, the largest remainders first); a last global batch smaller than the
  number of workers is dropped (:func:`global_batches`).
* Shuffling: one permutation per epoch from ``numpy.random.default_rng([seed, epoch])``,
  identical on every rank (:func:`epoch_permutation`).
* A dataset's splits: seeded disjoint subsets of its samples (:func:`split_indices`), as
  preprocessing makes them (arrays and image folders alike).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def shard_sizes(
    global_batch: int, workers: int, shares: Sequence[float] | None = None
) -> list[int]:
    """Samples of a global batch per rank: ``B // W``, plus one for the first ``B % W`` ranks;
    with ``shares`` (a weight per rank, any positive scale), one sample each and the other
    ``B - W`` in proportion to the shares, the largest remainders first (the lower rank on a
    tie): equal shares split as evenly as no shares."""
    if workers < 1 or global_batch < 0:
        raise ValueError(f"need workers >= 1 and global_batch >= 0, got {workers}, {global_batch}")
    if shares is None:
        base, extra = divmod(global_batch, workers)
        return [base + (1 if r < extra else 0) for r in range(workers)]
    if len(shares) != workers or not all(s > 0 for s in shares):
        raise ValueError(f"need {workers} shares above 0, got {list(shares)}")
    if global_batch < workers:
        raise ValueError(f"a global batch of {global_batch} leaves a rank of {workers} no sample")
    total, rest = float(sum(shares)), global_batch - workers
    exact = [rest * s / total for s in shares]
    sizes = [int(x) for x in exact]
    by_remainder = sorted(range(workers), key=lambda r: (sizes[r] - exact[r], r))
    for r in by_remainder[: rest - sum(sizes)]:
        sizes[r] += 1
    return [1 + n for n in sizes]


def shard_bounds(
    global_batch: int, workers: int, rank: int, shares: Sequence[float] | None = None
) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous share of a global batch (:func:`shard_sizes`)."""
    sizes = shard_sizes(global_batch, workers, shares)
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


def global_batches(n: int, batch_size: int, workers: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each global batch over ``n`` samples; a last batch smaller than
    ``workers`` is dropped so that every rank gets at least one sample per step."""
    return [
        (start, min(start + batch_size, n))
        for start in range(0, n, batch_size)
        if min(start + batch_size, n) - start >= workers
    ]


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of ``epoch``: reproducible from ``(seed, epoch)``, equal on every rank."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def split_indices(n: int, fractions: list[float], seed: int) -> list[np.ndarray]:
    """Seeded disjoint subsets of ``range(n)``: one per fraction, then the rest (all sorted).

    Each subset holds ``round(fraction * n)`` (as ``clusterbench.config.split_sizes`` counts);
    a :class:`ValueError` where one would be empty."""
    order = np.random.default_rng(seed).permutation(n)
    sizes = [round(f * n) for f in fractions]
    bounds = np.cumsum([0, *sizes])
    parts = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    parts.append(order[bounds[-1] :])
    if any(len(p) == 0 for p in parts):
        raise ValueError(
            f"{n} examples are too few for fractions {fractions}: a split would be empty"
        )
    return [np.sort(p) for p in parts]
