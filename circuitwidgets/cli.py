"""Command line: ``circuitwidgets train`` and ``circuitwidgets report``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _add_train(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from circuitwidgets.training.train import TrainConfig

    d = TrainConfig()
    p = sub.add_parser("train", help="train an attention-only model on the Python standard library, offline")
    p.add_argument("--layers", type=int, default=d.n_layers, help="number of attention layers (0, 1, 2, ...)")
    p.add_argument("--heads", type=int, default=d.n_heads)
    p.add_argument("--d-model", type=int, default=d.d_model)
    p.add_argument("--d-head", type=int, default=d.d_head)
    p.add_argument("--n-ctx", type=int, default=d.n_ctx)
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--device", default=d.device, help="torch device, e.g. cpu or cuda")
    p.add_argument("--eval-every", type=int, default=d.eval_every)
    p.add_argument("--cache", type=Path, default=None, help="where the tokenizer and token arrays are cached")
    p.add_argument("-o", "--out", type=Path, required=True, help="run directory (resumed if it holds a checkpoint)")


def _run_train(args: argparse.Namespace) -> int:
    from circuitwidgets.training.train import TrainConfig, train

    cfg = TrainConfig(
        n_layers=args.layers, n_heads=args.heads, d_model=args.d_model, d_head=args.d_head,
        n_ctx=args.n_ctx, vocab_size=args.vocab_size, batch_size=args.batch_size, steps=args.steps,
        lr=args.lr, seed=args.seed, threads=args.threads, device=args.device, eval_every=args.eval_every,
    )
    train(cfg, args.out, cache_dir=args.cache)
    print(f"model written to {args.out / 'model'}")
    return 0


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML page that walks through the paper on a model")
    p.add_argument("--model", default="attn-only-2l", help="a shipped model name, or a directory written by CircuitModel.save")
    p.add_argument("--text", default=None, help="text used for term importance (default: a short Python class)")
    p.add_argument("-o", "--out", type=Path, default=Path("report.html"), help="output HTML file")


def _run_report(args: argparse.Namespace) -> int:
    from circuitwidgets.model import CircuitModel
    from circuitwidgets.report import DEFAULT_TEXT, write_report
    from circuitwidgets.sources.pretrained import list_pretrained, load_pretrained, pretrained_card

    if Path(args.model).is_dir():
        model, card = CircuitModel.load(args.model), {}
    else:
        model = load_pretrained(args.model)
        card = pretrained_card(args.model) if args.model in list_pretrained() else {}
    path = write_report(model, args.out, text=args.text or DEFAULT_TEXT, card=card, log=lambda s: print(f"report: {s}", file=sys.stderr))
    print(f"Open {path.resolve()} in a browser: it works offline, with no kernel.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``circuitwidgets`` command."""
    parser = argparse.ArgumentParser(prog="circuitwidgets", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_report(sub)
    args = parser.parse_args(argv)
    if args.command == "train":
        return _run_train(args)
    if args.command == "report":
        return _run_report(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
