"""Grokking live: circuitwidgets' training loop against the same recipe written as a plain PyTorch loop.

Both train the same one-layer transformer (``a b =`` → ``(a + b) mod p``, no
LayerNorm, ReLU MLP) from the same initial weights on the same split, full
batch, AdamW (lr, weight decay 1, betas (0.9, 0.98)), measuring the test
loss and accuracy every ``--eval-every`` steps. The plain loop is how the
recipe is usually written: an ``nn.Module`` that embeds all three positions,
runs causal attention, the MLP and the unembedding at every position, and
reads the last one; ``torch.optim.AdamW`` with its defaults.

Measured in the same process, interleaved (ours, plain, ours, plain, ...):
seconds for ``--steps`` steps each (the median of ``--repeats``), and the two
loops' final test losses (equal to rounding: same mathematics). Then ours
trained until it groks (``stop_when_grokked``), timed: the live variant's
time to grok. One torch thread per loop unless ``--threads``. Prints JSON.

    nice python benchmarks/bench_grokking.py --p 31 --fraction 0.5 --d-model 32 --d-mlp 128 --lr 3e-3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import torch
from torch import nn

from circuitwidgets.training.grokking import train
from circuitwidgets.training.grokking.model import GrokConfig, init_weights, pairs, split


class PlainTransformer(nn.Module):
    """The recipe as a plain module: every position through every layer."""

    def __init__(self, w: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.p = {k: nn.Parameter(v.clone()) for k, v in w.items()}
        for k, v in self.p.items():
            self.register_parameter(k, v)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        P = self.p
        x = P["W_E"][tokens] + P["W_pos"]
        q = torch.einsum("npd,hde->nhpe", x, P["W_Q"])
        k = torch.einsum("npd,hde->nhpe", x, P["W_K"])
        v = torch.einsum("npd,hde->nhpe", x, P["W_V"])
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = torch.ones(3, 3, dtype=torch.bool).tril()
        z = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + torch.einsum("nhpe,hed->npd", z, P["W_O"])
        x = x + torch.relu(x @ P["W_in"] + P["b_in"]) @ P["W_out"] + P["b_out"]
        return (x @ P["W_U"])[:, -1]


def plain_loop(cfg: GrokConfig, steps: int, eval_every: int) -> tuple[float, float]:
    """Train with the plain module; return (seconds, final test loss)."""
    a, b = pairs(cfg.p)
    y = (a + b) % cfg.p
    tokens = torch.stack([a, b, torch.full_like(a, cfg.p)], dim=1)
    tr, te = split(cfg)
    model = PlainTransformer(init_weights(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2))
    t0 = time.perf_counter()
    test_loss = math.nan
    for step in range(steps + 1):
        loss = nn.functional.cross_entropy(model(tokens[tr]).double(), y[tr])
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                test_loss = float(nn.functional.cross_entropy(model(tokens[te]).double(), y[te]))
        if step == steps:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0, test_loss


def ours(cfg: GrokConfig, steps: int, eval_every: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    h = train(
        cfg.p, cfg.fraction, steps=steps, d_model=cfg.d_model, n_heads=cfg.n_heads, d_head=cfg.d_head,
        d_mlp=cfg.d_mlp, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=cfg.seed, eval_every=eval_every,
        checkpoint_every=steps,
    )  # fmt: skip
    return time.perf_counter() - t0, float(h.test_loss[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--p", type=int, default=31)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--d-mlp", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grok", action="store_true", help="also time ours until it groks")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = GrokConfig(
        args.p, args.fraction, args.d_model, args.n_heads, args.d_model // args.n_heads, args.d_mlp, args.lr
    )
    ours_s, plain_s, losses = [], [], {}
    for _ in range(args.repeats):
        s, losses["ours"] = ours(cfg, args.steps, args.eval_every)
        ours_s.append(s)
        s, losses["plain"] = plain_loop(cfg, args.steps, args.eval_every)
        plain_s.append(s)
    result: dict[str, object] = {
        "config": cfg.to_dict(),
        "steps": args.steps,
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "ours_seconds": statistics.median(ours_s),
        "plain_seconds": statistics.median(plain_s),
        "speedup": statistics.median(plain_s) / statistics.median(ours_s),
        "final_test_loss": losses,
    }
    if args.grok:
        t0 = time.perf_counter()
        h = train(
            cfg.p, cfg.fraction, steps=20_000, d_model=cfg.d_model, n_heads=cfg.n_heads, d_head=cfg.d_head,
            d_mlp=cfg.d_mlp, lr=cfg.lr, eval_every=args.eval_every, checkpoint_every=20_000, stop_when_grokked=True,
        )  # fmt: skip
        result |= {"grok_seconds": time.perf_counter() - t0, "grokked_at": h.grokked_at(), "final_step": h.final_step}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
