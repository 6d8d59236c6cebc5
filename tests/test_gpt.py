"""The GPT-style language models (clusterbench.models.gpt, clusterbench.models._gpt_net): shapes,
causality, tied embeddings, the sizes by name, scaled_dot_product_attention, bf16 on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from clusterbench.models import ModelError, build_model, resolve
from clusterbench.models.gpt import SIZES
from torch import nn


def tiny(t: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return build_model("gpt-tiny", 256, [t])


def test_logits_for_the_next_token_at_every_position():
    net = tiny()
    out = net(torch.randint(0, 256, (3, 32), dtype=torch.uint8))
    assert out.shape == (3, 32, 256) and out.dtype == torch.float32
    spec = resolve("gpt-tiny")
    assert (spec.task, spec.convolutional, spec.context) == ("language-model", False, 256)


def test_a_position_sees_only_itself_and_the_positions_before_it():
    net = tiny().eval()
    x = torch.randint(0, 256, (1, 32))
    changed = x.clone()
    changed[0, 20] = (x[0, 20] + 1) % 256
    a, b = net(x), net(changed)
    torch.testing.assert_close(a[:, :20], b[:, :20])
    assert not torch.allclose(a[:, 20:], b[:, 20:])


def test_attention_goes_through_scaled_dot_product_attention(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("is_causal"))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    tiny()(torch.randint(0, 256, (2, 16)))
    assert calls == [True] * SIZES["gpt-tiny"].layers


def test_embeddings_are_tied_and_blocks_are_pre_norm_without_dropout():
    net = tiny()
    assert net.head.weight is net.tokens.weight
    assert all(m.p == 0 for m in net.modules() if isinstance(m, nn.Dropout))
    block = net.blocks[0]
    assert isinstance(block.ln1, nn.LayerNorm) and isinstance(block.ln2, nn.LayerNorm)


@pytest.mark.parametrize(
    "name, layers, heads, width, context",
    [("gpt2-small", 12, 12, 768, 1024), ("gpt2-medium", 24, 16, 1024, 1024)],
)
def test_the_gpt2_shapes(name, layers, heads, width, context):
    size = SIZES[name]
    assert (size.layers, size.heads, size.width, size.context) == (layers, heads, width, context)
    assert resolve(name).context == context


def test_the_gpt2_small_network_has_gpt2_s_shape():
    net = build_model("gpt2-small", 256, [64])
    assert len(net.blocks) == 12 and net.positions.num_embeddings == 1024
    # GPT-2 small without its 50,257-token embedding: 124.4M - 38.6M + 256 * 768
    assert sum(p.numel() for p in net.parameters()) == 86_039_040


def test_a_sequence_longer_than_the_context_is_refused():
    with pytest.raises(ModelError, match="context is 1..256 tokens"):
        build_model("gpt-tiny", 256, [257])
    with pytest.raises(ModelError, match=r"takes token sequences \[T\]"):
        build_model("gpt-tiny", 256, [3, 8, 8])


def test_bf16_autocast_trains_on_the_cpu():
    net = tiny()
    x = torch.randint(0, 256, (4, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(x)
    assert logits.dtype == torch.bfloat16
    loss = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())
