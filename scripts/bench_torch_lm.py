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
import statistics
import sys
import time


class Parser(argparse.ArgumentParser):
    """argparse, with each refusal as one line (its usage block aside) and exit code 2."""

    def error(self, message):
        sys.stderr.write(f"bench_torch_lm.py: {message}\n")
        sys.exit(2)


def main():
    p = Parser(description=__doc__.split("\n")[0])
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
    # PyTorch only now: a bad command line is refused alike with it or without.
    try:
        import torch
        from torch_lm_model import Transformer
    except ImportError as e:
        p.error(f"needs PyTorch ({e}; Debian's python3-torch, which TESSERA_SETUP_TORCH=1 bash scripts/setup.sh "
                "installs, run with /usr/bin/python3)")
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
