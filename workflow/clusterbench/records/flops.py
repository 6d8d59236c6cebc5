"""A run's model-FLOPs figures, read back from run.json's ``flops``
(:mod:`clusterbench.training.flops` writes it): achieved TFLOP/s and model-FLOPs utilisation
(MFU) over the epochs a reader times. One function for the report and the history.

* **Achieved FLOP/s** of an epoch: its samples per second (images, or a language model's
  sequences; all workers) times the FLOPs of one sample's forward and backward.
* **MFU** of an epoch: that per device (over the epoch's ``workers``) over the peak of one
  device (run.json's ``flops.peak.per_device``: the GPU table's, or the CPU's measured).
* Over several epochs: the mean of the epochs' figures. A run.json written before FLOPs were
  counted, a network that could not be counted, or a device without a known peak gives NaN
  (and :func:`why_none` says which).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: The columns :func:`efficiency` gives.
COLUMNS = ("flops_per_sample", "peak_tflops_per_device", "tflops", "mfu")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check(info: Mapping[str, Any], path: Path) -> None:
    """run.json's ``flops``, where it has one: an object whose counts and peak are numbers or
    null; a ``ValueError`` naming ``path`` otherwise."""
    found = info.get("flops")
    if found is None:
        return
    per_sample = found.get("per_sample") if isinstance(found, dict) else None
    peak = found.get("peak") if isinstance(found, dict) else None
    fields = [
        *((per_sample or {}).get(k) for k in ("forward", "backward")),
        (peak or {}).get("per_device"),
    ]
    if not isinstance(per_sample, dict) or not isinstance(peak, dict):
        raise ValueError(f"{path}: malformed 'flops': needs objects 'per_sample' and 'peak'")
    if not all(v is None or (_number(v) and v >= 0) for v in fields):
        raise ValueError(
            f"{path}: malformed 'flops': per_sample.forward, per_sample.backward and "
            f"peak.per_device must be numbers >= 0 or null, got {fields}"
        )


def per_sample(info: Mapping[str, Any]) -> float | None:
    """The FLOPs of one sample's forward and backward (None: not counted)."""
    counted = (info.get("flops") or {}).get("per_sample") or {}
    forward, backward = counted.get("forward"), counted.get("backward")
    if not (_number(forward) and _number(backward)):
        return None
    return float(forward) + float(backward)


def peak(info: Mapping[str, Any]) -> float | None:
    """The peak FLOP/s of one device (None: not known)."""
    value = ((info.get("flops") or {}).get("peak") or {}).get("per_device")
    return float(value) if _number(value) and value > 0 else None


def efficiency(info: Mapping[str, Any], epochs: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """:data:`COLUMNS` over ``epochs`` (records with ``images_per_second`` and ``workers``, the
    timed ones): FLOPs per sample, the peak TFLOP/s of a device, the mean achieved TFLOP/s and
    the mean MFU (a fraction); NaN where a figure cannot be had."""
    flops, device_peak = per_sample(info), peak(info)
    rows = [
        (float(e["images_per_second"]), max(1, int(e.get("workers") or 1)))
        for e in epochs
        if _number(e.get("images_per_second"))
    ]
    out = dict.fromkeys(COLUMNS, math.nan)
    if flops is not None:
        out["flops_per_sample"] = flops
    if device_peak is not None:
        out["peak_tflops_per_device"] = device_peak / 1e12
    if flops is None or not rows:
        return out
    out["tflops"] = statistics.fmean(rate * flops for rate, _ in rows) / 1e12
    if device_peak is not None:
        out["mfu"] = statistics.fmean(
            rate / workers * flops / device_peak for rate, workers in rows
        )
    return out


def why_none(info: Mapping[str, Any]) -> str | None:
    """Why a run has no MFU (None: it has one, given timed epochs)."""
    found = info.get("flops")
    if not found:
        return "its run.json has no FLOPs (written before they were counted)"
    if per_sample(info) is None:
        problem = (found.get("per_sample") or {}).get("problem") or "not counted"
        return f"its model's FLOPs could not be counted ({problem})"
    if peak(info) is None:
        return f"no peak of its device is known ({(found.get('peak') or {}).get('source')})"
    return None
