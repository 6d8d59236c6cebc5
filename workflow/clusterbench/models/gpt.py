"""GPT-style decoder-only language models on byte tokens (vocabulary 256, no tokenizer), by
size: ``gpt-tiny`` (for tests and the CPU benchmark), ``gpt2-small`` (GPT-2's 124M shape: 12
layers, 12 heads, 768 wide, context 1024; with 256 tokens instead of 50,257 it has 85M
parameters) and ``gpt2-medium`` (24 layers, 16 heads, 1024 wide). The network is
:class:`clusterbench.models._gpt_net.GPT`.

Built as ``build(vocabulary, [T])``: ``T``, the data's sequence length, may be anything up to
the model's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from clusterbench.models import ModelError, ModelSpec


@dataclass(frozen=True)
class Size:
    layers: int
    heads: int
    width: int
    context: int


SIZES = {
    "gpt-tiny": Size(layers=4, heads=4, width=128, context=256),
    "gpt2-small": Size(layers=12, heads=12, width=768, context=1024),
    "gpt2-medium": Size(layers=24, heads=16, width=1024, context=1024),
}


def build(name: str, num_classes: int, input_shape: Sequence[int]) -> Any:
    """The untrained ``name`` for a vocabulary of ``num_classes`` and sequences ``[T]``."""
    from clusterbench.models._gpt_net import GPT

    size = SIZES[name]
    if len(input_shape) != 1:
        raise ModelError(
            f"model {name!r} takes token sequences [T], got input shape {list(input_shape)}"
        )
    if not 1 <= input_shape[0] <= size.context:
        raise ModelError(
            f"model {name!r}: sequences of {input_shape[0]} tokens, but its context is "
            f"1..{size.context} tokens"
        )
    return GPT(num_classes, size.context, size.layers, size.heads, size.width)


MODELS = {
    name: ModelSpec(
        name,
        partial(build, name),
        task="language-model",
        convolutional=False,
        context=size.context,
        description=(
            f"decoder-only transformer: {size.layers} layers, {size.heads} heads, "
            f"{size.width} wide, context {size.context}"
        ),
    )
    for name, size in SIZES.items()
}
