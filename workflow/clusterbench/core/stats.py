"""The noise rule: how sure a difference in throughput is, from the repeats and the epochs.

One rule, used by the report's recommendation (is the fastest configuration's margin over the
runner-up real?) and by the history's regression flag (is the newest throughput below the
history's?). A group of runs (a configuration's runs, a history point's entries) is summarised
by :func:`estimate`:

- its mean is the mean of its runs' mean throughputs (each run counts once, however many
  epochs it timed);
- its standard error (SE) is the largest of
  - the epochs' share: ``sqrt(sum(s_i**2 / n_i)) / k`` over its k runs, run i with the sample
    sd ``s_i`` over its ``n_i`` timed epochs (runs with fewer than 2 timed epochs add nothing);
  - the repeats' share: the sample sd of the k run means ``/ sqrt(k)`` (k >= 2);
  - ``sigma / sqrt(k)`` for a run-to-run spread ``sigma`` known from elsewhere (the history's:
    a single new run varies from run to run as much as the earlier ones did).

Two groups differ beyond the noise when the difference of their means exceeds :data:`Z` (3)
times the standard error of that difference, ``sqrt(SE_a**2 + SE_b**2)``; when either group has
no spread (a single run of a single timed epoch) the noise is unknown and nothing is claimed.

Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: A difference is beyond the noise above Z standard errors of the difference.
Z = 3.0

#: The rule in words, as the report, the history page and the CLI state it.
RULE = (
    "beyond the noise when the difference of the means exceeds 3 standard errors of the "
    "difference, sqrt(SE_a\u00b2 + SE_b\u00b2); each mean is over its runs' mean images/s (a "
    "language model's tokens/s), its SE "
    "the larger of the epochs' share, sqrt(\u03a3 sd\u00b2/epochs) / runs, and the repeats' share, "
    "the sd of the run means / sqrt(runs)"
)


@dataclass(frozen=True)
class Estimate:
    """A group of runs' mean throughput and its standard error (NaN: unknown)."""

    mean: float
    se: float
    runs: int
    epochs: int  # timed epochs, over all its runs


@dataclass(frozen=True)
class Difference:
    """``a - b`` of two estimates, the standard error of that difference, and whether it is
    beyond the noise (None: the noise is unknown)."""

    value: float
    se: float
    beyond: bool | None


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def run_spread(means: Sequence[float]) -> float:
    """The sample sd of run means (NaN with fewer than 2)."""
    values = [m for m in means if _finite(m)]
    return statistics.stdev(values) if len(values) >= 2 else math.nan


def estimate(
    means: Sequence[float],
    sds: Sequence[float | None],
    epochs: Sequence[int],
    sigma: float = math.nan,
) -> Estimate:
    """The mean and standard error of a group of runs (see the module's docstring): ``means``,
    ``sds`` and ``epochs`` per run (its mean, sample sd and number of timed epochs); runs
    without a timed epoch (a NaN mean) are left out. ``sigma``: a run-to-run spread known from
    elsewhere (NaN: none)."""
    runs = [(m, s, n) for m, s, n in zip(means, sds, epochs, strict=True) if _finite(m)]
    k = len(runs)
    if not k:
        return Estimate(math.nan, math.nan, 0, 0)
    mean = statistics.fmean(m for m, _, _ in runs)
    spread = [s * s / n for _, s, n in runs if _finite(s) and n >= 2]
    shares = [math.sqrt(sum(spread)) / k] if spread else []
    repeats = run_spread([m for m, _, _ in runs])
    shares += [x / math.sqrt(k) for x in (repeats, sigma) if _finite(x)]
    se = max(shares) if shares else math.nan
    return Estimate(mean, se, k, sum(int(n) for _, _, n in runs))


def difference(a: Estimate, b: Estimate) -> Difference:
    """``a.mean - b.mean``, its standard error and whether it exceeds :data:`Z` of them."""
    value = a.mean - b.mean
    se = math.hypot(a.se, b.se) if _finite(a.se) and _finite(b.se) else math.nan
    beyond = bool(value > Z * se) if _finite(se) and se > 0 else None
    return Difference(value, se, beyond)
