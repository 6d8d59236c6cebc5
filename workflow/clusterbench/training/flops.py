"""A run's model FLOPs: counted once per run, and what run.json records for model-FLOPs
utilisation (MFU).

* **The count** (:func:`count`): ``torch.utils.flop_counter.FlopCounterMode`` over one training
  step's forward and, separately, its backward (the loss of the run's task included) on a
  batch of :data:`SAMPLES` samples of the run's input shape, divided by that batch: the
  FLOPs of one sample. The network is built again on PyTorch's ``meta`` device (shapes only:
  no memory, no arithmetic), from the ``arch`` that ``model.pt`` records; a network that cannot
  be built or run there (your own model's code may not allow it) is counted on the CPU
  instead. It counts what FlopCounterMode counts: matrix products, convolutions and attention
  (2 FLOPs per multiply-add); elementwise work, normalisation and the optimiser are not
  counted, as MFU's definition leaves them out. The backward of the first layer has no
  gradient of the input to compute, so a backward is a little under twice the forward.
* **The peak** of each rank's device (:mod:`clusterbench.training.peaks`): the GPU table's, or
  the CPU's measured, when the rank starts and again when training has ended, the better of
  the two (a CPU that other work loads measures low: the 2-core reference machine, at a load
  of 3 to 8, measured a third of its quiet rate in some launches, and MFU came out above
  100 %); every rank gives its own, gathered.
* **run.json's ``flops``** (:func:`run_record`): the count per sample and per unit (image, or a
  language model's token), the peak per device (the mean over the ranks) and its source.
  The report and the history compute achieved TFLOP/s (units/s x FLOPs per unit) and MFU
  (that over the peak of all the devices) from it, over the epochs they time
  (:mod:`clusterbench.records.flops`).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: Samples of the batch the FLOPs are counted on (two: a BatchNorm in training mode needs more
#: than one value per channel).
SAMPLES = 2
#: What is counted, in words (run.json).
COUNTED = (
    "torch.utils.flop_counter.FlopCounterMode: matrix products, convolutions and attention "
    "of a training step's forward and backward, per sample"
)


def step_flops(
    arch: Mapping[str, Any], task: str, device: str, samples: int = SAMPLES
) -> tuple[float, float]:
    """``(forward, backward)`` FLOPs of one training step on ``samples`` samples of zeros,
    the network ``arch`` built on ``device`` (``meta`` or ``cpu``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from clusterbench.models import build_model
    from clusterbench.training.objectives import objective

    with torch.device(device):
        net = build_model(**arch)
        shape = list(arch["input_shape"])
        if task == "language-model":
            x = torch.zeros((samples, *shape), dtype=torch.long)
            y = torch.zeros_like(x)
        else:
            x = torch.zeros((samples, *shape))
            y = torch.zeros(samples, dtype=torch.long)
    net.train()
    with FlopCounterMode(display=False) as forward:
        loss = objective(task).loss_sum(net(x), y)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    return float(forward.get_total_flops()), float(backward.get_total_flops())


def count(arch: Mapping[str, Any], task: str) -> dict[str, Any]:
    """The FLOPs of one sample's forward and backward (module docstring), and where they were
    counted; ``{"forward": None, ...}`` with the reason where the network cannot be run."""
    problems = []
    for device in ("meta", "cpu"):
        try:
            forward, backward = step_flops(arch, task, device)
        except Exception as exc:  # noqa: BLE001 - your own model's code may raise anything
            problems.append(f"on {device}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        return {"forward": forward / SAMPLES, "backward": backward / SAMPLES, "counted_on": device}
    return {"forward": None, "backward": None, "counted_on": None, "problem": "; ".join(problems)}


def better(first: Mapping[str, Any] | None, second: Mapping[str, Any] | None) -> Any:
    """The higher of one rank's two measured peaks (a table's are the same twice)."""
    found = [p for p in (first, second) if p and p.get("flops")]
    if not found:
        return first or second
    return max(found, key=lambda p: p["flops"])


def peak_summary(peaks: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The ranks' peaks (each rank's :func:`clusterbench.training.peaks.device_peak`) as one:
    the mean per device, the lowest and highest, the precision and rank 0's source."""
    known = [p for p in peaks if p]
    rates = [float(p["flops"]) for p in known if p.get("flops")]
    first = known[0] if known else {"precision": None, "source": "no peak gathered"}
    if len(rates) != len(peaks) or not rates:
        missing = next((p for p in known if not p.get("flops")), first)
        source = missing.get("source") or "a rank gave no peak"
        return {"per_device": None, "precision": first.get("precision"), "source": source}
    return {
        "per_device": statistics.fmean(rates),
        "lowest": min(rates),
        "highest": max(rates),
        "devices": len(rates),
        "precision": first.get("precision"),
        "source": first.get("source"),
    }


def run_record(
    arch: Mapping[str, Any],
    data: Any,
    facts: Sequence[Mapping[str, Any]],
    ends: Sequence[Mapping[str, Any] | None] = (),
) -> dict[str, Any]:
    """run.json's ``flops``: the count per sample and per unit (:func:`count`), and the peak of
    the devices: ``facts`` (every rank's gathered facts, each with its ``peak`` at the start),
    ``ends`` (every rank's peak when training ended, where measured), the better of the two."""
    counted = count(arch, data.task)
    units = int(getattr(data, "units_per_sample", 1))
    total = None
    if counted["forward"] is not None:
        total = counted["forward"] + counted["backward"]
    return {
        "per_sample": counted,
        "units_per_sample": units,
        "per_unit": None if total is None else total / units,
        "counted": COUNTED,
        "peak": peak_summary(
            [
                better(f.get("peak"), end)
                for f, end in itertools.zip_longest(facts, ends[: len(facts)])
            ]
        ),
    }
