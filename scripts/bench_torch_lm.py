#!/usr/bin/env python3
"""bench_torch_lm.py: PyTorch's time per train step of the transformer that `bench_train --model lm`
times, on the same model and batch, for the comparison of issue 17 (tessera at least 10x faster).

The model is models/transformer.h's: byte embedding (vocabulary 256), `--layers` pre-norm blocks
(RMSNorm with a scale, q/k/v projections to heads x d_head, rotary on q and k, causal attention,
output projection; RMSNorm, up projection, tanh GELU, down projection), a final RMSNorm and an
untied unembedding, mean cross-entropy over every position, Adam (lr 1e-3). Batch 8 of 128
random bytes by default, float32, `--threads` intra-op threads (2: the machine's cores). One JSON
line like bench_train's: the median over `--steps` timed steps after `--warmup`.

    /usr/bin/python3 scripts/bench_torch_lm.py              # needs Debian's python3-torch
"""
import argparse
import json
import math
import statistics
import time

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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    # Checked as bench_train checks its own (until 2026-11-28 a zero or a negative ended in a
    # traceback, or ran and reported "layers": -1).
    for name in ("layers", "d_model", "heads", "d_ff", "seq_len", "batch", "steps", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    if a.d_model % a.heads != 0 or (a.d_model // a.heads) % 2 != 0:
        p.error(f"--d-model {a.d_model} must split into --heads {a.heads} of an even width (rotary embeddings)")
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    model = Transformer(a.layers, a.d_model, a.heads, a.d_ff, a.seq_len)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randint(0, 256, (a.batch, a.seq_len + 1))
    tokens, labels = data[:, :-1], data[:, 1:]
    times = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"bench": "torch_train_step", "model": "lm", "torch": torch.__version__,
                      "threads": a.threads, "batch": a.batch, "seq_len": a.seq_len, "layers": a.layers,
                      "d_model": a.d_model, "heads": a.heads, "d_ff": a.d_ff, "steps": a.steps,
                      "ms_median": round(statistics.median(times), 3), "ms_min": round(min(times), 3),
                      "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
