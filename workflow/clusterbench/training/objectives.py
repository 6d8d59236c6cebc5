"""What a step minimises and what validation measures, by the model's task
(:data:`clusterbench.models.TASKS`).

``classification``  logits ``[N, K]`` against labels ``[N]``: cross-entropy, accuracy;
                    one unit (image) per sample.
``language-model``  logits ``[N, T, V]`` against next tokens ``[N, T]``: cross-entropy per
                    token, token accuracy (perplexity is ``exp`` of the loss); ``T`` units
                    (tokens) per sample.

Losses are summed over the units, in float32 (under bf16 autocast too); the loop scales the
sum so that the backend's average over the ranks is the mean over the global batch's units.
"""

from __future__ import annotations

from typing import Any


class Classification:
    """Classes of images (or any input): one logit per class."""

    name = "classification"

    @staticmethod
    def loss_sum(logits: Any, target: Any) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(logits.float(), target, reduction="sum")

    @staticmethod
    def correct(logits: Any, target: Any) -> Any:
        return (logits.argmax(-1) == target).sum()


class LanguageModel(Classification):
    """The next token at every position of a sequence: one logit per vocabulary entry."""

    name = "language-model"

    @staticmethod
    def loss_sum(logits: Any, target: Any) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="sum")


OBJECTIVES = {cls.name: cls for cls in (Classification, LanguageModel)}


def objective(task: str) -> type[Classification]:
    """The objective of ``task``."""
    try:
        return OBJECTIVES[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r} (known: {', '.join(OBJECTIVES)})") from None
