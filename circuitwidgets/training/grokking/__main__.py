"""``python -m circuitwidgets.training.grokking``: train (or resume) a run into a directory, with progress lines."""

from __future__ import annotations

import argparse

import torch

from circuitwidgets.training.grokking.train import train


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and train."""
    ap = argparse.ArgumentParser(prog="python -m circuitwidgets.training.grokking", description=__doc__)
    ap.add_argument("--out", required=True, help="run directory (resumed if it holds a run)")
    ap.add_argument("--p", type=int, default=113)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--d-head", type=int, default=32)
    ap.add_argument("--d-mlp", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fp16", action="store_true", help="write checkpoints in float16")
    args = ap.parse_args(argv)
    history = train(
        args.p,
        args.fraction,
        steps=args.steps,
        d_model=args.d_model,
        n_heads=args.n_heads,
        d_head=args.d_head,
        d_mlp=args.d_mlp,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every,
        out_dir=args.out,
        checkpoint_dtype=torch.float16 if args.fp16 else torch.float32,
        threads=args.threads,
        progress=True,
    )
    print(f"done: {history.final_step} steps in {history.train_seconds:.0f} s; grokked at {history.grokked_at()}")


if __name__ == "__main__":
    main()
