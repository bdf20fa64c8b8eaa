"""``circuitwidgets train-dictionary``: train sparse dictionaries on a model's activations from the shell.

Building the parser imports nothing heavy (no torch); :func:`run` imports the trainer.
Example (the shipped ``gelu-2l`` dictionaries' command, on their cards)::

    circuitwidgets train-dictionary --model gelu-2l -o runs/dicts/gelu-2l \\
        --dict transcoder@0 --dict transcoder@1 --dict sae:resid_post@0 \\
        --activation topk --width 2048 -k 32 --tokens 3000000 --batch-size 2048 --lr 1e-3 --passes 2 --threads 1
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

#: ``(option, DictionaryTrainConfig field, type, help)``: left out, the config's default holds.
_OPTIONS: list[tuple[str, str, type, str]] = [
    ("--tokens", "tokens", int, "training rows (tokens; with --passes P each distinct token is used P times)"),
    ("--batch-size", "batch_size", int, "rows per optimiser step"),
    ("--lr", "lr", float, "Adam learning rate (warm-up, then constant, then linear decay over the last 20%%)"),
    ("--passes", "passes", int, "times each streamed row is used (1: every row is a new token)"),
    ("--n-ctx", "n_ctx", int, "tokens per window run through the model"),
    ("--buffer-rows", "buffer_rows", int, "rows in the shuffle buffer"),
    ("--dead-tokens", "dead_tokens", int, "a feature silent for this many rows is dead (auxiliary loss)"),
    ("--k-aux", "k_aux", int, "dead features in the auxiliary loss per row (default: half the output width)"),
    ("--aux-coefficient", "aux_coefficient", float, "weight of the auxiliary loss"),
    ("--warmup-steps", "warmup_steps", int, "steps of linear learning-rate warm-up"),
    ("--windows-per-run", "windows_per_run", int, "windows per model pass when filling the buffer"),
    ("--time-limit", "time_limit", float, "seconds of training: plan fewer tokens if --tokens would not fit"),
    ("--calibration-steps", "calibration_steps", int, "steps timed before --time-limit fits the plan"),
    ("--seed", "seed", int, "seed of the window order and the initialisation"),
    ("--threads", "threads", int, "torch CPU threads (1 is fastest on a shared machine)"),
    ("--device", "device", str, "cpu or cuda"),
    ("--checkpoint-every", "checkpoint_every", int, "steps between checkpoints"),
    ("--log-every", "log_every", int, "steps between progress lines"),
]

_SPEC = re.compile(r"(?P<kind>sae|transcoder|skip-transcoder)(?::(?P<site>[a-z_]+))?@(?P<layer>\d+)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``train-dictionary`` to the ``circuitwidgets`` subcommands."""
    p = sub.add_parser(
        "train-dictionary",
        help="train sparse dictionaries (SAEs, transcoders) on a model's activations over the standard library",
        description="Train TopK or BatchTopK dictionaries on activations streamed from runs of a model over the "
        "Python standard library (never all held in memory). Several dictionaries train from one pass. Rerun the "
        "same command to resume from the last checkpoint in --out.",
    )
    p.add_argument("--model", default="gelu-2l", help="a shipped model name or a CircuitModel.save directory")
    p.add_argument("-o", "--out", type=Path, required=True, help="run directory (checkpoints, log, results)")
    p.add_argument(
        "--dict",
        dest="dicts",
        action="append",
        required=True,
        metavar="KIND[:SITE]@LAYER",
        help="a dictionary: transcoder@1, skip-transcoder@0, sae:resid_post@0 (repeat for several)",
    )
    p.add_argument("--activation", default="batchtopk", choices=["topk", "batchtopk"], help="default: batchtopk")
    p.add_argument("--width", type=int, default=4096, help="features per dictionary (default 4096)")
    p.add_argument("-k", type=int, default=32, help="active features per token (default 32)")
    p.add_argument("--cache", type=Path, default=None, help="where to cache the tokenised corpus (default OUT/cache)")
    for option, field, kind, text in _OPTIONS:
        p.add_argument(
            option, dest=field, type=kind, default=argparse.SUPPRESS, help=f"{text} (default: the trainer's)"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``train-dictionary``."""
    from circuitwidgets.errors import ArgumentError
    from circuitwidgets.features.train import DictionarySpec, DictionaryTrainConfig, train_dictionaries
    from circuitwidgets.model import CircuitModel
    from circuitwidgets.sources.pretrained import load_pretrained

    specs = []
    for text in args.dicts:
        match = _SPEC.fullmatch(text)
        if match is None:
            raise ArgumentError(
                f"--dict: expected KIND[:SITE]@LAYER (e.g. transcoder@1, sae:resid_post@0), got {text!r}"
            )
        specs.append(
            DictionarySpec(
                kind=match["kind"],
                layer=int(match["layer"]),
                site=match["site"],
                activation=args.activation,
                width=args.width,
                k=args.k,
            )
        )
    given = {field: getattr(args, field) for _, field, _, _ in _OPTIONS if hasattr(args, field)}
    device = given.get("device", "cpu")  # the model runs where the dictionaries train: its pass feeds them
    if Path(args.model).is_dir():
        model = CircuitModel.load(args.model, device=device)
    else:
        model = load_pretrained(args.model, device=device)
    done = train_dictionaries(model, specs, args.out, DictionaryTrainConfig(**given), cache_dir=args.cache)
    for name in done:
        print(f"{name} written to {args.out / f'{name}.safetensors'}")
    return 0
