"""Ship trained dictionaries: float16 files, measured on held-out code, with a card.

``python -m circuitwidgets.features.publish RUN_DIR --model gelu-2l`` reads each
dictionary of a :func:`~circuitwidgets.features.train.train_dictionaries` run (the
finished ``<name>.safetensors``, else the latest checkpoint), rounds it to float16,
evaluates the rounded one (:func:`~circuitwidgets.features.evaluation.evaluate`) on the
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.evaluation import evaluate
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


def _run_record(run_dir: Path, command: str) -> dict[str, Any]:
    """What a run's card says of its training: the command, rows, time, config and where it ran."""
    state = json.loads((run_dir / "state.json").read_text())
    train_cfg = json.loads((run_dir / "train_config.json").read_text())
    hw_path = run_dir / "hardware.json"
    stretches = json.loads(hw_path.read_text()) if hw_path.exists() else []
    return {
        "command": command,
        "training": {
            "rows": state["tokens"],
            "steps": state["step"],
            "passes": train_cfg["passes"],
            # rows are token positions streamed from the corpus, each put into the buffer `passes` times
            "streamed_positions": state["tokens"] // max(1, train_cfg["passes"]),
            "train_seconds": state["seconds"],
            "planned_rows": train_cfg["tokens"],
            "config": {k: v for k, v in train_cfg.items() if k != "specs"},
        },
        # where it trained (recorded by the trainer; a run from before that record: this machine, flagged)
        "hardware": stretches[-1] if stretches else {**_here(), "recorded_at_publish": True},
    }


def _here() -> dict[str, Any]:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}  # fmt: skip


def publish(
    runs: Sequence[tuple[Path, str]], model: CircuitModel, dest: Path | None = None, windows: int = 256,
    ci_windows: int = 8, n_ctx: int = 128, pick: Mapping[str, int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write the dictionaries of ``runs`` (``(run_dir, command)`` pairs) as float16 with one card.

    Every dictionary of every run is shipped, unless ``pick`` maps the names to ship to the index of
    the run each comes from (a name trained in two runs must be picked). ``dest`` defaults to the
    package's folder for ``model``.
    """
    dest = dest or dictionaries_dir(model.name)
    dest.mkdir(parents=True, exist_ok=True)
    sources = _sources(runs, pick)
    tokens = held_out_windows(model, windows, n_ctx)
    entries: dict[str, Any] = {}
    for name, i in sources.items():
        run_dir, command = runs[i]
        finished = run_dir / f"{name}.safetensors"
        d = load(finished) if finished.is_file() else from_checkpoint(run_dir / f"{name}.checkpoint.safetensors")
        shipped = load(save(d, dest / f"{name}.safetensors", dtype=torch.float16))
        entries[name] = {
            **shipped.config(),
            "file": f"{name}.safetensors",
            "finished": finished.is_file(),
            **_run_record(run_dir, command),
            "metrics": _measure(shipped, model, tokens),
            "ci_metrics": _measure(shipped, model, tokens[:ci_windows]),
        }
        print(f"{name}: {entries[name]['metrics']}", flush=True)
    for stale in set(p.name for p in dest.glob("*.safetensors")) - {e["file"] for e in entries.values()}:
        (dest / stale).unlink()  # a dictionary no longer shipped must not stay loadable without a card entry
    card = {
        "model": model.name,
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


def _sources(runs: Sequence[tuple[Path, str]], pick: Mapping[str, int] | None) -> dict[str, int]:
    """Which run each shipped dictionary comes from."""
    trained: dict[str, list[int]] = {}
    for i, (run_dir, _) in enumerate(runs):
        for spec in json.loads((run_dir / "train_config.json").read_text())["specs"]:
            trained.setdefault(_name(spec), []).append(i)
    if pick is None:
        twice = sorted(n for n, where in trained.items() if len(where) > 1)
        if twice:
            raise ArgumentError(f"pick: {twice} trained in several runs; name the run each is shipped from")
        return {n: where[0] for n, where in trained.items()}
    for n, i in pick.items():
        if i not in trained.get(n, []):
            raise ArgumentError(f"pick: {n!r} was not trained in run {i} (trained: {trained})")
    return dict(pick)


def _name(spec: dict[str, Any]) -> str:
    short = {"transcoder": "tc", "skip-transcoder": "stc"}
    return f"L{spec['layer']}.{short.get(spec['kind'], spec['site'])}"


def _readme(card: dict[str, Any]) -> str:
    e = card["evaluation"]
    lines = [
        f"# Sparse dictionaries of `{card['model']}`",
        "",
        "Loaded by `circuitwidgets.features.load_pretrained(" + json.dumps(card["model"]) + ")`. Measured on "
        f"{e['held_out_windows']} windows of {e['n_ctx']} held-out tokens (Python standard library files never "
        "trained on), with the float16 weights shipped here:",
        "",
        "| dictionary | kind | width | k | L0 | explained variance | CE loss recovered | KL score | dead | dense |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, d in card["dictionaries"].items():
        m = d["metrics"]
        lines.append(
            f"| {name} | {d['kind']} ({d['in_site']} → {d['out_site']}) | {d['d_sae']} | {d['k']} | {m['l0']:.1f} | "
            f"{m['explained_variance']:.3f} | {m['ce_loss_recovered']:.3f} | {m['kl_score']:.3f} | "
            f"{m['dead_fraction']:.1%} | {m['dense_fraction']:.1%} |"
        )
    by_command: dict[str, list[str]] = {}
    for name, d in card["dictionaries"].items():
        by_command.setdefault(d["command"], []).append(name)
    lines += ["", "How they were trained (each command reproduces its run):", ""]
    for command, names in by_command.items():
        d = card["dictionaries"][names[0]]
        t, hw = d["training"], d["hardware"]
        where = hw.get("cuda_device") or f"{hw.get('cpus')} CPU cores ({hw.get('threads', '?')} threads)"
        lines += [
            f"- {', '.join(f'`{n}`' for n in names)}: one run of {t['steps']:,} steps, {t['rows']:,} rows "
            f"({t['streamed_positions']:,} token positions streamed, each used {t['passes']}×) in "
            f"{t['train_seconds']:,.0f} s on {where}, torch {hw.get('torch')}:",
            "",
            f"      {command}",
            "",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    """``python -m circuitwidgets.features.publish RUN_DIR --model NAME --command "..."``."""
    from circuitwidgets.sources.pretrained import load_pretrained

    parser = argparse.ArgumentParser(description="ship dictionary runs' results with one card")
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--model", default="gelu-2l")
    parser.add_argument(
        "--command", action="append", required=True, help="the command that reproduced each run (one per run, in order)"
    )
    parser.add_argument(
        "--pick", action="append", default=None, metavar="NAME=RUN", help="ship NAME from run RUN (0-based)"
    )
    parser.add_argument("--windows", type=int, default=256)
    args = parser.parse_args()
    if len(args.command) != len(args.run_dirs):
        parser.error(f"--command: expected one per run directory ({len(args.run_dirs)}), got {len(args.command)}")
    pick = None if args.pick is None else {p.split("=")[0]: int(p.split("=")[1]) for p in args.pick}
    torch.set_num_threads(1)
    runs = list(zip(args.run_dirs, args.command, strict=True))
    card = publish(runs, load_pretrained(args.model), windows=args.windows, pick=pick)
    print(_readme(card))


if __name__ == "__main__":
    main()
