"""``precision: bf16`` for the new kinds of model: a torchvision ResNet (channels-last or not) and
a small GPT-style language model, trained by the loop's own steps (``training.steps``) on the
CPU: the forward runs in bfloat16, the loss is computed and summed in float32, the weights and
their gradients stay float32, and the loss falls. (The GPU's turn is in tests/test_gpu.py.)"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from clusterbench.backends import DistributedOptimizer, Identity, Runtime
from clusterbench.training.objectives import objective
from clusterbench.training.state import Partial
from clusterbench.training.step_times import StepTimes
from clusterbench.training.steps import StepContext, Stretch, run_steps
from test_train import run_config
from torch import nn


class OneRank(Runtime):
    """A world of one: the base class answers every collective without a backend."""

    name = "one"

    @classmethod
    def start(cls, device_type: str) -> OneRank:
        return cls(Identity(0, 1, 0, 1, 0, 1), device_type)

    def shutdown(self) -> None:
        pass

    def sync_batchnorm(self, device):
        raise NotImplementedError

    def wrap(self, model, optimizer, bn, grad_compression="none"):
        return model, DistributedOptimizer(optimizer)

    def _allreduce_sum(self, tensor, name):
        raise AssertionError("a world of one has nothing to exchange")

    _allreduce_sum_autograd = _broadcast_tensors_ = _broadcast_object = _allreduce_sum
    _allgather_object = _allreduce_sum


class FixedBatches:
    """A data source of ``steps`` fixed batches (the loop's interface, the parts steps use)."""

    units_per_sample = 1

    def __init__(self, task: str, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
        self.task, self.x, self.y, self.steps = task, x, y, steps
        self.train_size = len(y) * steps
        if task == "language-model":
            self.units_per_sample = y.shape[1]

    def epoch_batches(self, epoch, batches, first, rank, size):
        for _ in batches[first:]:
            yield self.x, self.y


def train_bf16(model: nn.Module, data: FixedBatches, epochs: int) -> list[float]:
    """``epochs`` passes of the loop's steps under bf16; each pass's mean loss."""
    run = run_config(workers=1, precision="bf16", lr=0.02, momentum=0.9, weight_decay=0.0)
    rt = OneRank.start("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=run["lr"], momentum=0.9)
    net, dist_optimizer = rt.wrap(model, optimizer, "local")
    ctx = StepContext(rt, run, torch.device("cpu"), model, net, dist_optimizer, data)
    ctx.step_times = StepTimes(ctx.device)  # as the loop sets it each epoch
    n = len(data.y)
    batches = [(i * n, (i + 1) * n) for i in range(data.steps)]
    losses = []
    for epoch in range(epochs):
        begin = Stretch(0, Partial(), 0, 0.0, False)
        inputs = data.epoch_batches(epoch, batches, 0, 0, 1)
        end = run_steps(ctx, epoch, batches, inputs, begin, len(batches), 1000)
        losses.append(end.partial.loss_sum / (end.images * data.units_per_sample))
    return losses


def assert_fp32_weights_and_gradients(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, name
        assert p.grad is None or p.grad.dtype == torch.float32, name
    for name, b in model.named_buffers():
        assert b.dtype != torch.bfloat16, name


@pytest.mark.slow  # bf16 convolutions on a CPU: about 5 s each
@pytest.mark.parametrize("channels_last", [False, True])
def test_bf16_trains_a_torchvision_resnet_with_fp32_weights_and_loss(channels_last):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=4)
    x, y = torch.randn(4, 3, 16, 16), torch.arange(4) % 4
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    assert logits.dtype == torch.bfloat16  # the forward does run in bf16
    assert objective("classification").loss_sum(logits, y).dtype == torch.float32
    losses = train_bf16(model, FixedBatches("classification", x, y, steps=2), epochs=3)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0], losses
    assert_fp32_weights_and_gradients(model)


class TinyGPT(nn.Module):
    """Pre-norm causal self-attention (scaled_dot_product_attention), tied embeddings: the shape
    of the issue's GPT, at a size for a unit test."""

    def __init__(self, vocab: int = 256, dim: int = 32, seq: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        self.norm1, self.norm2, self.final = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, tokens: torch.Tensor) -> Any:
        import torch.nn.functional as F

        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        h = h + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        h = h + self.mlp(self.norm2(h))
        return self.final(h) @ self.embed.weight.T  # tied: the embedding is the output layer


def test_bf16_trains_a_gpt_style_language_model_with_fp32_weights_and_loss():
    torch.manual_seed(0)
    model = TinyGPT()
    text = torch.randint(0, 256, (4, 17))
    x, y = text[:, :-1], text[:, 1:]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    assert logits.dtype == torch.bfloat16
    assert objective("language-model").loss_sum(logits, y).dtype == torch.float32
    losses = train_bf16(model, FixedBatches("language-model", x, y, steps=4), epochs=5)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] - 0.5, losses
    assert_fp32_weights_and_gradients(model)
