"""Command line: ``circuitwidgets train``, ``circuitwidgets train-dictionary`` and ``circuitwidgets report``.

Building the parser imports nothing heavy: each subcommand imports what it
needs (torch, the training code, the report) only when it runs, so ``--help``
returns at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from circuitwidgets.features import command as features_command

_DESCRIPTION = """\
Widgets for "A Mathematical Framework for Transformer Circuits", from the shell.

  circuitwidgets report -o report.html   explain the shipped two-layer model in one offline HTML page
  circuitwidgets train -o runs/my-run    train an attention-only model on the Python standard library
  circuitwidgets train-dictionary --dict transcoder@0 -o runs/tc0
                                         train a sparse dictionary (SAE, transcoder) on a model's activations

Run "circuitwidgets COMMAND --help" for a command's options.
"""

#: Defaults shown by ``circuitwidgets train --help``: those of
#: ``circuitwidgets.training.train.TrainConfig``, restated here so that the help
#: does not import torch (``tests/test_cli.py`` checks that the two agree). An
#: option left out is not passed on, so ``TrainConfig`` alone decides its value.
#: The shipped-model size budget, restated here so that ``--help`` imports no torch
#: (``tests/test_cli.py`` checks it equals ``circuitwidgets.training.train.MAX_MODEL_BYTES``).
MAX_MODEL_BYTES = 8 * 2**20

TRAIN_DEFAULTS: dict[str, int | float | str] = {
    "n_layers": 2,
    "n_heads": 4,
    "d_model": 128,
    "d_head": 32,
    "n_ctx": 256,
    "vocab_size": 2048,
    "batch_size": 16,
    "steps": 8000,
    "lr": 1e-2,
    "seed": 0,
    "threads": 1,
    "device": "cpu",
    "eval_every": 500,
    "decay_steps": 0,
    "d_mlp": 0,
    "act_fn": "gelu",
    "norm": "none",
}

#: ``(option, TrainConfig field, type, help)`` of ``circuitwidgets train``.
_TRAIN_OPTIONS: list[tuple[str, str, type, str]] = [
    ("--layers", "n_layers", int, "number of attention layers, 0 or more"),
    ("--heads", "n_heads", int, "attention heads per layer"),
    ("--d-model", "d_model", int, "width of the residual stream"),
    ("--d-head", "d_head", int, "width of each head"),
    ("--n-ctx", "n_ctx", int, "context length in tokens"),
    ("--vocab-size", "vocab_size", int, "size of the byte-level BPE vocabulary"),
    ("--batch-size", "batch_size", int, "sequences per step"),
    ("--steps", "steps", int, "training steps"),
    ("--lr", "lr", float, "learning rate, constant after warm-up"),
    ("--seed", "seed", int, "random seed of the initialisation and the batches"),
    ("--threads", "threads", int, "CPU threads torch may use"),
    ("--device", "device", str, "torch device, e.g. cpu or cuda"),
    ("--eval-every", "eval_every", int, "steps between evaluations"),
    ("--decay-steps", "decay_steps", int, "anneal the learning rate to 0 (a cosine) over this many final steps"),
    ("--mlp", "d_mlp", int, "hidden width of each layer's MLP (0: attention-only)"),
    ("--act", "act_fn", str, "MLP nonlinearity: gelu, gelu_new, relu or solu (SoLU + LayerNorm over the neurons)"),
    ("--norm", "norm", str, "normalisation: none or layernorm (before each sublayer and the unembedding)"),
]


def _add_train(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "train",
        help="train a small transformer (attention-only, or with --mlp and --norm) on the Python standard library, offline",
        description="Train a small transformer (attention-only by default; --mlp and --norm add GELU MLPs and "
        "LayerNorm) on the Python standard library, offline and "
        "deterministically. A run directory that already holds a checkpoint is resumed.",
    )
    for option, name, kind, text in _TRAIN_OPTIONS:
        p.add_argument(
            option,
            dest=name,
            type=kind,
            default=argparse.SUPPRESS,
            metavar=option[2:].upper().replace("-", "_"),
            help=f"{text} (default: {TRAIN_DEFAULTS[name]})",
        )
    p.add_argument("--cache", type=Path, default=None, help="where the tokenizer and token arrays are cached")
    p.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_MODEL_BYTES,
        metavar="BYTES",
        help=f"refuse a model whose float16 weights would exceed this (default: {MAX_MODEL_BYTES}, the shipped-model budget)",
    )
    p.add_argument("-o", "--out", type=Path, required=True, help="run directory (resumed if it holds a checkpoint)")


#: ``--act`` values → the trainer's activation names (``solu`` is the glossary's SoLU + LN).
_TRAIN_ACTS = {"gelu": "gelu", "gelu_new": "gelu_new", "relu": "relu", "solu": "solu_ln", "solu_ln": "solu_ln"}


def _train_activation(value: object) -> str:
    """The trainer's name for ``--act``; an unknown one is refused naming the option."""
    from circuitwidgets.errors import ArgumentError

    if not isinstance(value, str) or value not in _TRAIN_ACTS:
        raise ArgumentError(f"--act: expected one of {tuple(_TRAIN_ACTS)}, got {value!r}")
    return _TRAIN_ACTS[value]


def _run_train(args: argparse.Namespace) -> int:
    from circuitwidgets.training.train import TrainConfig, train

    given = {name: getattr(args, name) for _, name, _, _ in _TRAIN_OPTIONS if hasattr(args, name)}
    given["act_fn"] = _train_activation(given.get("act_fn", TRAIN_DEFAULTS["act_fn"]))
    cfg = TrainConfig(**given)
    train(cfg, args.out, cache_dir=args.cache, max_bytes=args.max_bytes)
    print(f"model written to {args.out / 'model'}")
    return 0


def shipped_models() -> list[str]:
    """The shipped models' names, read from the package's folder without importing torch (``tests/test_cli.py``
    checks they equal :func:`circuitwidgets.list_pretrained`)."""
    root = Path(__file__).resolve().parent / "pretrained"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "model.safetensors").is_file())


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML page that walks through the paper on a model",
        description="Write one self-contained HTML page that walks through the paper on a model: attention "
        "patterns, QK and OV circuits, composition and term importance. It opens from disk with no kernel "
        "and no network.",
    )
    p.add_argument(
        "--model",
        default="attn-only-2l-12h",
        help="a shipped model (" + ", ".join(shipped_models()) + "), or a local directory written by "
        "CircuitModel.save or by a Hugging Face model's save_pretrained (Llama, Gemma, Qwen, Mistral, Phi-3, OLMo, "
        "SmolLM, GPT-2, Pythia; default: attn-only-2l-12h, the 12-heads-per-layer model)",
    )
    p.add_argument("--text", default=None, help="text used for term importance (default: a short Python class)")
    p.add_argument(
        "--dictionaries",
        type=Path,
        default=None,
        help="a directory of the model's dictionaries (circuitwidgets .safetensors files) for the features part "
        "(default: a shipped model's shipped dictionaries, if it has any)",
    )
    p.add_argument(
        "-o", "--out", type=Path, default=Path("report.html"), help="output HTML file (default: report.html)"
    )


def _looks_like_a_path(model: str) -> bool:
    """A ``--model`` written as a local path (``./x``, ``../x``, ``/x``, ``~/x``, or a name with a separator that
    exists in part) rather than a shipped model's name."""
    return model.startswith((".", "/", "~")) or (os.sep in model and Path(model).parent.exists())


def _check_report_paths(args: argparse.Namespace) -> None:
    """``-o`` and ``--model`` checked before any work (errors name the argument, the expected and the received)."""
    from circuitwidgets.errors import ArgumentError

    out = Path(args.out)
    if out.is_dir():
        raise ArgumentError(f"-o: expected an HTML file to write, got {str(out)!r}, a directory")
    if out.parent.exists() and not out.parent.is_dir():
        raise ArgumentError(f"-o: expected a file in a directory, got {str(out)!r}, whose parent is a file")
    model = str(args.model)
    if not Path(model).expanduser().is_dir() and model not in shipped_models():
        if _looks_like_a_path(model):
            raise ArgumentError(
                f"--model: expected a shipped model or an existing local directory, got {model!r}: no such directory"
            )
        raise ArgumentError(
            f"--model: expected one of the shipped models {shipped_models()} or a local directory, got {model!r}"
        )
    folder = args.dictionaries
    if folder is not None and not (folder.is_dir() and any(folder.glob("*.safetensors"))):
        raise ArgumentError(
            f"--dictionaries: expected a directory of dictionary .safetensors files, got {str(folder)!r}"
            + ("" if folder.is_dir() else ": no such directory")
        )


def _report_dictionaries(args: argparse.Namespace, model: Any) -> dict[str, Any] | None:
    """``--dictionaries DIR``'s dictionaries, else a shipped model's shipped ones, else ``None`` (no features part)."""
    from circuitwidgets.features.files import load
    from circuitwidgets.features.pretrained import list_pretrained_dictionaries, load_pretrained

    if args.dictionaries is not None:
        found = {p.name.removesuffix(".safetensors"): load(p) for p in sorted(args.dictionaries.glob("*.safetensors"))}
        for d in found.values():
            d.check_model(model)  # (a dictionary of another model is a typed error naming it, before any work)
        return found
    if str(args.model) in shipped_models() and list_pretrained_dictionaries(str(args.model)):
        return dict(load_pretrained(str(args.model)))
    return None


def _run_report(args: argparse.Namespace) -> int:
    _check_report_paths(args)
    from circuitwidgets.report import DEFAULT_TEXT, write_report
    from circuitwidgets.sources.pretrained import list_pretrained, load_pretrained, pretrained_card
    from circuitwidgets.sources.safetensors_file import load_safetensors

    with warnings.catch_warnings(record=True) as caught:  # summarised in one line below, not printed as they come
        warnings.simplefilter("always")
        local = Path(args.model).expanduser()
        if local.is_dir():  # ours (CircuitModel.save) or a Hugging Face save_pretrained directory
            model, card = load_safetensors(str(local), dtype=None), {}
        else:
            model = load_pretrained(args.model)
            card = pretrained_card(args.model) if args.model in list_pretrained() else {}
        path = write_report(
            model,
            args.out,
            text=args.text or DEFAULT_TEXT,
            card=card,
            log=lambda s: print(f"report: {s}", file=sys.stderr),
            dictionaries=_report_dictionaries(args, model),
        )
    if caught:
        print(f"report: {warning_summary(caught)}", file=sys.stderr)
    print(f"Open {path.resolve()} in a browser: it works offline, with no kernel.")
    return 0


def warning_summary(caught: Sequence[warnings.WarningMessage]) -> str:
    """``3 warnings: MLPPathsExcludedWarning ×3 (copying_scores: model 'gelu-2l' has MLPs; …)``: one line."""
    kinds: dict[str, list[str]] = {}
    for w in caught:
        kinds.setdefault(w.category.__name__, []).append(str(w.message).split(";", 1)[0])
    parts = [f"{name} ×{len(msgs)} ({msgs[0][:100]}…)" for name, msgs in kinds.items()]
    return f"{len(caught)} warning{'s' if len(caught) != 1 else ''}: " + "; ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    """The ``circuitwidgets`` parser; building it imports neither torch nor the widgets."""
    from circuitwidgets import __version__

    parser = argparse.ArgumentParser(
        prog="circuitwidgets", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"circuitwidgets {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    features_command.add_parser(sub)
    _add_report(sub)
    _add_calibration(sub)
    return parser


def _add_calibration(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "calibration",
        help="show or clear the causal sweeps' calibration cache",
        description="The causal sweeps keep the cost curves and path choices they measured on this machine in a "
        "cache folder ($CIRCUITWIDGETS_CACHE_DIR, else $XDG_CACHE_HOME/circuitwidgets, else ~/.cache/circuitwidgets), "
        "so that a fresh process's first sweep is planned at once. Prints the folder; --clear empties it.",
    )
    p.add_argument("--clear", action="store_true", help="remove every calibration file")


def _run_calibration(args: argparse.Namespace) -> int:
    from circuitwidgets.causal.calibration import calibration_dir, clear_calibration

    if args.clear:
        print(f"removed {clear_calibration()} calibration file(s) from {calibration_dir()}")
    else:
        print(calibration_dir())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``circuitwidgets`` command.

    A bad argument or input (any of :mod:`circuitwidgets.errors`) is one line on
    standard error and exit status 2, as argparse's own errors; no traceback.
    """
    from circuitwidgets.errors import CircuitWidgetsError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return _run_train(args)
        if args.command == "train-dictionary":
            return features_command.run(args)
        if args.command == "report":
            return _run_report(args)
        if args.command == "calibration":
            return _run_calibration(args)
    except CircuitWidgetsError as exc:
        print(f"circuitwidgets {args.command}: error: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
