"""Ship trained dictionaries: float16 files, measured on held-out code, with a card.

``python -m circuitwidgets.features.publish RUN_DIR --model gelu-2l`` reads each
dictionary of a :func:`~circuitwidgets.features.train.train_dictionaries` run (the
finished ``<name>.safetensors``, else the latest checkpoint), rounds it to float16,
evaluates the rounded one (:func:`~circuitwidgets.features.evaluate.evaluate`) on the
held-out files of the corpus (the first ``windows`` windows of ``n_ctx`` tokens), and
writes ``circuitwidgets/pretrained/<model>/dictionaries/``: the files, ``card.json`` and
``README.md``. The card also keeps the metrics of a small slice (``ci_windows``) that
the tests recompute from the shipped files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.evaluate import evaluate
from circuitwidgets.features.files import load, read_safetensors, save
from circuitwidgets.features.pretrained import dictionaries_dir
from circuitwidgets.features.stream import held_out_tokens
from circuitwidgets.model import CircuitModel

#: Metrics written to cards (``evaluate``'s scalars).
CARD_METRICS = (
    "l0", "explained_variance", "mse", "cosine", "ce_loss_clean", "ce_loss_spliced", "ce_loss_ablated",
    "ce_loss_recovered", "kl_spliced", "kl_ablated", "kl_score", "dead_fraction", "dense_fraction",
)  # fmt: skip


def held_out_windows(model: CircuitModel, count: int, n_ctx: int = 128) -> torch.Tensor:
    """The first ``count`` windows ``[count, n_ctx]`` of the corpus's held-out files (never trained on)."""
    val = held_out_tokens(model)
    n = min(count, val.size // n_ctx)
    return torch.from_numpy(val[: n * n_ctx].astype(np.int64).reshape(n, n_ctx))


def from_checkpoint(path: Path) -> Dictionary:
    """The dictionary held by a training checkpoint (``<name>.checkpoint.safetensors``)."""
    tensors, meta = read_safetensors(path, "checkpoint")
    config = json.loads(meta["config"])
    weights = {
        "W_enc": tensors["param.W_enc_t"].t().contiguous(),
        **{n: tensors[f"param.{n}"] for n in ("b_enc", "W_dec", "b_dec", "W_skip") if f"param.{n}" in tensors},
    }
    if config["activation"] == "batchtopk":
        weights["threshold"] = torch.full_like(weights["b_enc"], float(meta["threshold"]))
    return Dictionary.from_tensors(config, weights, source=str(path))


def _measure(d: Dictionary, model: CircuitModel, tokens: torch.Tensor) -> dict[str, float]:
    got = evaluate(d, model, tokens)
    return {name: round(float(got[name]), 5) for name in CARD_METRICS} | {"n_tokens": got["n_tokens"]}


def publish(
    run_dir: Path, model: CircuitModel, command: str, dest: Path | None = None, windows: int = 256,
    ci_windows: int = 8, n_ctx: int = 128,
) -> dict[str, Any]:  # fmt: skip
    """Write the run's dictionaries (float16) and their card into ``dest`` (default: the package's folder)."""
    dest = dest or dictionaries_dir(model.name)
    dest.mkdir(parents=True, exist_ok=True)
    state = json.loads((run_dir / "state.json").read_text())
    train_cfg = json.loads((run_dir / "train_config.json").read_text())
    tokens = held_out_windows(model, windows, n_ctx)
    entries: dict[str, Any] = {}
    for spec in train_cfg["specs"]:
        name = _name(spec)
        finished = run_dir / f"{name}.safetensors"
        d = load(finished) if finished.is_file() else from_checkpoint(run_dir / f"{name}.checkpoint.safetensors")
        shipped = load(save(d, dest / f"{name}.safetensors", dtype=torch.float16))
        entries[name] = {
            **shipped.config(),
            "file": f"{name}.safetensors",
            "finished": finished.is_file(),
            "metrics": _measure(shipped, model, tokens),
            "ci_metrics": _measure(shipped, model, tokens[:ci_windows]),
        }
    card = {
        "model": model.name,
        "command": command,
        "training": {
            "rows": state["tokens"],
            "steps": state["step"],
            "passes": train_cfg["passes"],
            "distinct_tokens": state["tokens"] // max(1, train_cfg["passes"]),
            "train_seconds": state["seconds"],
            "planned_rows": train_cfg["tokens"],
            "config": {k: v for k, v in train_cfg.items() if k != "specs"},
        },
        "hardware": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "threads": train_cfg["threads"],
            "device": train_cfg["device"],
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "evaluation": {
            "held_out_windows": int(tokens.shape[0]),
            "n_ctx": n_ctx,
            "ci_windows": ci_windows,
            # the CI slice itself: another Python's standard library would give other held-out tokens
            "ci_tokens": tokens[:ci_windows].tolist(),
        },
        "dictionaries": entries,
    }
    (dest / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    (dest / "README.md").write_text(_readme(card))
    return card


def _name(spec: dict[str, Any]) -> str:
    short = {"transcoder": "tc", "skip-transcoder": "stc"}
    return f"L{spec['layer']}.{short.get(spec['kind'], spec['site'])}"


def _readme(card: dict[str, Any]) -> str:
    t = card["training"]
    lines = [
        f"# Sparse dictionaries of `{card['model']}`",
        "",
        "Loaded by `circuitwidgets.features.load_pretrained(" + json.dumps(card["model"]) + ")`. Reproduce:",
        "",
        f"    {card['command']}",
        "",
        f"Trained on {t['rows']:,} rows ({t['distinct_tokens']:,} distinct tokens of the Python standard library, "
        f"each used {t['passes']}×) in {t['train_seconds']:,.0f} s on {card['hardware']['cpus']} shared CPU cores "
        f"({card['hardware']['threads']} thread, torch {card['hardware']['torch']}). Measured on "
        f"{card['evaluation']['held_out_windows']} windows of {card['evaluation']['n_ctx']} held-out tokens, "
        "with the float16 weights shipped here:",
        "",
        "| dictionary | kind | width | k | L0 | explained variance | CE loss recovered | KL score | dead | dense |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in card["dictionaries"].items():
        m = e["metrics"]
        lines.append(
            f"| {name} | {e['kind']} ({e['in_site']} → {e['out_site']}) | {e['d_sae']} | {e['k']} | {m['l0']:.1f} | "
            f"{m['explained_variance']:.3f} | {m['ce_loss_recovered']:.3f} | {m['kl_score']:.3f} | "
            f"{m['dead_fraction']:.1%} | {m['dense_fraction']:.1%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """``python -m circuitwidgets.features.publish RUN_DIR --model NAME --command "..."``."""
    from circuitwidgets.sources.pretrained import load_pretrained

    parser = argparse.ArgumentParser(description="ship a dictionary run's results with a card")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--model", default="gelu-2l")
    parser.add_argument("--command", required=True, help="the command that reproduces the run (for the card)")
    parser.add_argument("--windows", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    card = publish(args.run_dir, load_pretrained(args.model), args.command, windows=args.windows)
    print(_readme(card))


if __name__ == "__main__":
    main()
