"""Your own model, as config/examples/own-model.yaml trains it: ``model:
"config.examples.mynets:build"`` from the checkout's root (the jobs run with the working
directory first on ``sys.path``; or put this file's folder on ``PYTHONPATH`` and write
``mynets:build``).

clusterbench calls ``build(num_classes, input_shape)`` once per rank when the run starts:
``input_shape`` is the data's ``[C, H, W]`` (``[1, 8, 8]`` for the digits); it returns an
``nn.Module`` mapping a batch of normalised images ``[N, C, H, W]`` to logits
``[N, num_classes]``. An import error, an exception here or another output shape stops the run
at its start, naming this module, the callable and the cause.
"""

from __future__ import annotations

from torch import nn


def build(num_classes: int, input_shape: list[int]) -> nn.Module:
    """A small CNN: two 3x3 conv-BN-ReLU layers, global average pooling, a linear head."""
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )
