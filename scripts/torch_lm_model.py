"""torch_lm_model.py: the PyTorch model of scripts/bench_torch_lm.py, models/transformer.h's
transformer (see bench_torch_lm.py's description). A module of its own so that bench_torch_lm.py
checks its command line before it imports PyTorch."""
import math

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.attn_norm = torch.nn.Parameter(torch.ones(d_model))
        self.w_q = torch.nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.w_k = torch.nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.w_v = torch.nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.w_o = torch.nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model))
        self.mlp_norm = torch.nn.Parameter(torch.ones(d_model))
        self.w_up = torch.nn.Parameter(torch.randn(d_model, d_ff) / math.sqrt(d_model))
        self.w_down = torch.nn.Parameter(torch.randn(d_ff, d_model) / math.sqrt(d_ff))

    def forward(self, h, cos, sin):
        b, s, d = h.shape
        a = rmsnorm(h, self.attn_norm)
        q = (a @ self.w_q).view(b, s, self.heads, self.d_head)
        k = (a @ self.w_k).view(b, s, self.heads, self.d_head)
        v = (a @ self.w_v).view(b, s, self.heads, self.d_head)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_head)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        o = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, s, d)
        h = h + o @ self.w_o
        m = rmsnorm(h, self.mlp_norm)
        return h + F.gelu(m @ self.w_up, approximate="tanh") @ self.w_down


def rmsnorm(x, scale, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Transformer(torch.nn.Module):
    def __init__(self, layers, d_model, heads, d_ff, seq_len, vocab=256, base=10000.0):
        super().__init__()
        self.embed = torch.nn.Parameter(torch.randn(vocab, d_model))
        self.blocks = torch.nn.ModuleList(Block(d_model, heads, d_ff) for _ in range(layers))
        self.final_norm = torch.nn.Parameter(torch.ones(d_model))
        self.unembed = torch.nn.Parameter(torch.randn(d_model, vocab) / math.sqrt(d_model))
        half = d_model // heads // 2
        freq = base ** (-torch.arange(half, dtype=torch.float32) / half)
        angle = torch.arange(seq_len, dtype=torch.float32)[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos()[None, :, None, :])
        self.register_buffer("sin", angle.sin()[None, :, None, :])

    def forward(self, tokens, labels):
        h = self.embed[tokens]
        for block in self.blocks:
            h = block(h, self.cos, self.sin)
        logits = rmsnorm(h, self.final_norm) @ self.unembed
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
