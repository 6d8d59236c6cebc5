"""A GPT-style decoder-only language model (:mod:`clusterbench.models.gpt`): learned token
and position embeddings, pre-norm transformer blocks (causal self-attention through
:func:`torch.nn.functional.scaled_dot_product_attention`, then a GELU MLP, each added to the
residual stream after a LayerNorm), a final LayerNorm, and an output layer tied to the token
embedding (GPT-2's shape and initialisation).

Input: token ids ``[N, T]`` (any integer type: byte tokens are stored uint8); output: logits
``[N, T, V]`` for the next token at every position. No dropout by default: a benchmark, and a
run resumed from a checkpoint stays bit-for-bit the same as one never stopped.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees itself and the positions before
    it; one projection makes queries, keys and values."""

    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        q, k, v = (
            part.view(n, t, self.heads, c // self.heads).transpose(1, 2)
            for part in self.qkv(x).split(c, dim=2)
        )
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(n, t, c))


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * width, width),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``layers`` blocks of ``heads`` heads, ``width`` wide, for sequences of up to ``context``
    tokens of a vocabulary of ``vocab``."""

    def __init__(
        self,
        vocab: int,
        context: int,
        layers: int,
        heads: int,
        width: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.context = context
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied: one matrix embeds and predicts tokens
        self.apply(_init)
        # GPT-2: the projections into the residual stream scaled by 1/sqrt(2 * layers)
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        idx = idx.long()  # byte tokens come as uint8, which an embedding does not take
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(f"a sequence of {t} tokens is longer than the context {self.context}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tokens(idx) + self.positions(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
