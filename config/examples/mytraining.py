"""Your own loss and optimiser, as config/examples/own-model.yaml's run ``mynet-adamw`` trains
with them: ``loss: "config.examples.mytraining:smoothed"`` and ``optimizer:
"config.examples.mytraining:adamw"`` (found as your own model is: the jobs run with the working
directory first on ``sys.path``).

clusterbench calls ``smoothed(outputs, targets)`` at every step and validation batch, on the
network's outputs (logits ``[N, num_classes]``; a language model's ``[N, T, vocabulary]``) and
the targets (``[N]``; ``[N, T]``). It returns the loss **summed** over the batch, as torch's
losses with ``reduction="sum"``: clusterbench divides by the global batch, so the gradient is
the global batch's mean whatever each worker's share of it.

``adamw(parameters, lr)`` is called once per rank when the run starts, with the model's
trainable parameters and the run's ``lr``; it returns any ``torch.optim.Optimizer`` over all of
them. The run's schedule sets each param group's learning rate at every step; the run's
``momentum`` and ``weight_decay`` are SGD's and not passed: set your own here. The optimiser's
state (AdamW's moments) is in every checkpoint, so a run continued from one goes on exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def smoothed(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy with label smoothing 0.1, summed over the batch."""
    return F.cross_entropy(outputs, targets, reduction="sum", label_smoothing=0.1)


def adamw(parameters: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """AdamW with decoupled weight decay 0.01."""
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=0.01)
