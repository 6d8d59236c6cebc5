"""The memory format a run trains in: channels-last (NHWC in memory) or contiguous (NCHW).

A run's ``channels_last`` is ``true``, ``false`` or ``auto`` (the default). ``auto`` picks
channels-last for a convolutional model (:attr:`clusterbench.models.ModelSpec.convolutional`)
on the CPU and on GPUs, and contiguous NCHW for a model without convolutions (it gains nothing)
and for inputs that are no images. Measured on the 2-core reference CPU (one process, global
batch 128, interleaved, 3 rounds): a training step of ResNet-20 on 32x32x3 images ran 1.32-1.38x
faster channels-last, the small CNN on 8x8 digits 1.01-1.04x; on NVIDIA GPUs cuDNN's tensor-core
kernels take NHWC (PyTorch's channels-last guidance; not measured here). Where another model is
measured to be slower channels-last, its spec says ``convolutional=False``.

The choice and its reason are recorded in ``run.json`` (``effective.memory_format``,
``effective.memory_format_reason``) and shown on the report's runs page. The model is converted
before training; the loop makes each batch's images contiguous in the chosen format (a no-op for
the channels-last view that :func:`clusterbench.data.images.normalize_images` already returns).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHANNELS_LAST = "channels_last"
CONTIGUOUS = "contiguous"


def choose(run: Mapping[str, Any], device_type: str, task: str) -> tuple[str, str]:
    """``(memory format, why)`` for ``run`` on ``device_type`` (cpu / cuda) and its data's
    ``task``: :data:`CHANNELS_LAST` or :data:`CONTIGUOUS`."""
    from clusterbench.models import resolve

    asked = run["channels_last"]
    spec = resolve(run["model"])
    if task != "classification" or spec.task != "classification":
        # no image tensor to lay out: whatever was asked, nothing is channels-last (the config
        # check refuses a run's own channels_last here: clusterbench.config.effects)
        setting = "auto" if asked == "auto" else f"channels_last: {str(asked).lower()}"
        return CONTIGUOUS, f"{setting}: the inputs are no images"
    if asked is True:
        return CHANNELS_LAST, "channels_last: true"
    if asked is False:
        return CONTIGUOUS, "channels_last: false"
    if not spec.convolutional:
        return CONTIGUOUS, f"auto: {run['model']} is not a convolutional model"
    return CHANNELS_LAST, f"auto: a convolutional model ({run['model']}) on {device_type}"


def torch_format(name: str) -> Any:
    """The ``torch.memory_format`` of :data:`CHANNELS_LAST` or :data:`CONTIGUOUS`."""
    import torch

    return torch.channels_last if name == CHANNELS_LAST else torch.contiguous_format
