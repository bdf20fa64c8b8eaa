"""Publish a training run as a shipped model, with a card of measured findings.

``python -m circuitwidgets.training.publish RUN_DIR NAME`` converts the run's
latest checkpoint to a float16 model directory under
``circuitwidgets/pretrained/NAME`` and measures on it, with the engine, the
paper's findings that the card then states. Nothing in the card is typed by
hand: every number comes from this command.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from circuitwidgets import circuits
from circuitwidgets.model import CircuitModel
from circuitwidgets.training.train import export_model
from circuitwidgets.training.transformer import ToyConfig, ToyTransformer

PRETRAINED = Path(__file__).resolve().parent.parent / "pretrained"

REAL_PASSAGE = '''def read_config(self, path):
    """Read the configuration file at path."""
    with open(path) as handle:
        for line in handle:
            key, value = line.split("=", 1)
            self.options[key.strip()] = value.strip()
    return self.options
'''


def _round(x: Any, digits: int = 3) -> Any:
    if isinstance(x, np.ndarray):
        return [_round(v, digits) for v in x.tolist()]
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, digits)
    return x


def _half_length(model: CircuitModel, wanted: int) -> int:
    """A repeated half of ``wanted`` tokens, shortened so BOS and both halves fit the model's context."""
    return max(1, min(wanted, (model.cfg.n_ctx - 1) // 2))


def _loss_halves(model: CircuitModel, n: int = 100, seed: int = 0) -> tuple[float, float]:
    n = _half_length(model, n)  # (a context-128 model, the SoLU pair's, gets halves of 63)
    tokens = circuits.repeated_random_tokens(model, seq_len=n, n_seqs=8, seed=seed)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return float(loss[:, 1:n].mean()), float(loss[:, n + 1 :].mean())


def _repeated_passage_halves(model: CircuitModel) -> tuple[float, float]:
    half = model.to_tokens(REAL_PASSAGE, prepend_bos=False)[0]
    half = half[: _half_length(model, half.numel())]
    bos = torch.tensor([model.tokenizer.bos_token_id or 0])
    tokens = torch.cat([bos, half, half])[None]
    loss = torch.nn.functional.cross_entropy(model(tokens)[0, :-1], tokens[0, 1:], reduction="none")
    n = half.numel()
    return float(loss[1:n].mean()), float(loss[n + 1 :].mean())


def measure_findings(model: CircuitModel) -> dict[str, Any]:
    """The paper's findings as measured on ``model`` (numbers only, rounded)."""
    L = model.cfg.n_layers
    out: dict[str, Any] = {}
    samples = [" def", "(", "self", "import", " return"]
    out["top_bigrams"] = {
        s: [
            model.tokenizer.token_str(int(i))
            for i in (model.W_E[model.to_tokens(s, prepend_bos=False)[0, 0]] @ model.W_U).topk(8).indices
        ]
        for s in samples
    }
    if L == 0:
        return out
    circuit_names: tuple[Literal["ov", "qk"], ...] = ("ov", "qk")
    methods: tuple[Literal["eigen", "diagonal", "topk"], ...] = ("eigen", "diagonal", "topk")
    for circuit in circuit_names:
        for method in methods:
            out[f"copying_{circuit}_{method}"] = _round(circuits.copying_scores(model, circuit=circuit, method=method))
    detectors: tuple[Literal["previous_token", "duplicate_token", "induction"], ...] = (
        "previous_token",
        "duplicate_token",
        "induction",
    )
    for detector in detectors:
        out[f"head_{detector}"] = _round(circuits.head_scores(model, kind=detector))
    first, second = _loss_halves(model)
    out["repeated_random_loss"] = {"first_half": round(first, 3), "second_half": round(second, 3)}
    first, second = _repeated_passage_halves(model)
    out["repeated_passage_loss"] = {"first_half": round(first, 3), "second_half": round(second, 3)}
    if L >= 2:
        kinds: tuple[Literal["Q", "K", "V"], ...] = ("Q", "K", "V")
        for kind in kinds:
            raw = circuits.composition_scores(model, kind=kind)
            base = raw - circuits.composition_scores(model, kind=kind, baseline=True)
            out[f"composition_{kind}"] = _round(raw[0, :, 1, :])
            out[f"composition_{kind}_baseline"] = round(float(np.nanmean(base)), 4)
        out["qk_kcomp_eigen"] = _round(circuits.copying_scores(model, circuit="qk_kcomp", method="eigen"))
        ind = circuits.head_scores(model, kind="induction")
        prev = circuits.head_scores(model, kind="previous_token")
        ih, ph = int(ind[1].argmax()), int(prev[0].argmax())
        k_base = circuits.composition_scores(model, kind="K", baseline=True)
        out["induction_head"] = {
            "layer": 1,
            "head": ih,
            "score": round(float(ind[1, ih]), 3),
            "previous_token_head": {"layer": 0, "head": ph, "score": round(float(prev[0, ph]), 3)},
            "k_composition_from_previous_token_head_minus_baseline": round(float(k_base[0, ph, 1, ih]), 4),
            "strongest_k_composition_source": int(np.nanargmax(k_base[0, :, 1, ih])),
        }
    tokens = model.to_tokens(REAL_PASSAGE)
    ti = circuits.term_importance(model, tokens)
    out["term_importance"] = {
        "losses": _round(ti.losses),
        "marginal": _round(ti.marginal),
        "layer_order1": _round(ti.layer_order1),
        "full_loss": round(ti.full_loss, 3),
    }
    return out


def _card_markdown(name: str, card: dict[str, Any]) -> str:
    t = card["training"]
    lines = [
        f"# {name}",
        "",
        f"{_kind_words(card['config'])} with {card['config']['n_layers']} layer(s) trained by `{card['command']}`.",
        "",
        f"- Corpus: {t['corpus'].get('corpus', '?')} — {t['corpus'].get('n_train_tokens', '?')} training tokens, {t['corpus'].get('n_val_files', '?')} held-out files.",
        f"- Tokenizer: byte-level BPE (`tokenizers`), {card['config']['d_vocab']} tokens, id 0 = `<|BOS|>`.",
        f"- Shape: d_model {card['config']['d_model']}, {card['config']['n_heads']} heads × {card['config']['d_head']}, context {card['config']['n_ctx']}; "
        f"{_parts_words(card['config'])}; sinusoidal positions added to query/key inputs only.",
        f"- Training: {t['steps']} steps × {t['batch_size']} × {t['n_ctx']} tokens = {t['tokens']:,} tokens; {t['train_seconds']:.0f} s of wall time to step {t['evaluated_at_step']} "
        f"{_device_words(t)} "
        f"(lr {t['lr']}, AdamW β=(0.9, 0.95), wd 0.01, {_schedule_words(t)}, clip 1.0, seed {t['seed']}).",
        f"- Validation loss at step {t['evaluated_at_step']}: {t['val_loss']} nats/token.",
        "",
        "## Findings measured on these weights",
        "",
        "```json",
        json.dumps(card["findings"], indent=1, ensure_ascii=False),
        "```",
        "",
    ]
    return "\n".join(lines)


#: Sections of a card's README written by hand after publishing (measured by named tests), kept on republishing.
KEPT_SECTIONS = ("## Findings (causal)", "## Repeated random tokens")


def _kept_sections(readme: Path) -> str:
    """The part of an existing README from the first kept section on (``""`` if none)."""
    if not readme.exists():
        return ""
    text = readme.read_text(encoding="utf-8")
    starts = [text.find(heading) for heading in KEPT_SECTIONS if heading in text]
    return "\n" + text[min(starts) :] if starts else ""


def _kind_words(config: dict[str, Any]) -> str:
    if config.get("has_mlp"):
        return f"A transformer with {config.get('act_fn')} MLPs (width {config.get('d_mlp')}) and LayerNorm"
    return "An attention-only transformer"


def _parts_words(config: dict[str, Any]) -> str:
    if config.get("has_mlp"):
        return (
            f"an MLP of width {config.get('d_mlp')} ({config.get('act_fn')}) after each attention layer, a LayerNorm "
            "before each sublayer and before the unembedding (folded into the weights that read it), biases on the "
            "attention output and the MLPs"
        )
    return "no MLP, no biases, no layer norm"


def _device_words(t: dict[str, Any]) -> str:
    if str(t.get("device", "cpu")).startswith("cuda"):
        return "on one NVIDIA H100 GPU (four candidate runs shared it; float32, so a CPU rerun agrees to rounding, not bit for bit)"
    return "on one CPU thread of a shared 2-core machine"


def _train_command(cfg: ToyConfig, train_cfg: dict[str, Any], step: int, run_dir: Path) -> str:
    """The ``circuitwidgets train`` command that reproduces the checkpoint (resuming changes nothing)."""
    decay = int(train_cfg.get("decay_steps", 0))
    options = f" --decay-steps {decay}" if decay else ""
    if cfg.d_mlp:
        options += f" --mlp {cfg.d_mlp} --act {cfg.act_fn}"
    if cfg.norm != "none":
        options += f" --norm {cfg.norm}"
    for option, name, default in (
        ("--lr", "lr", 1e-2),
        ("--n-ctx", "n_ctx", 256),
        ("--batch-size", "batch_size", 16),
        ("--eval-every", "eval_every", 500),
    ):
        if train_cfg.get(name, default) != default:
            options += f" {option} {train_cfg[name]}"
    if train_cfg.get("device", "cpu") != "cpu":
        options += f" --device {train_cfg['device']}"
    return (
        f"circuitwidgets train --layers {cfg.n_layers} --heads {cfg.n_heads} --d-model {cfg.d_model} "
        f"--d-head {cfg.d_head} --steps {step}{options} -o {run_dir}"
    )


def _schedule_words(t: dict[str, Any]) -> str:
    decay = int(t.get("decay_steps", 0))
    if not decay:
        return "100 warm-up steps then constant"
    return f"100 warm-up steps, constant, then a cosine to 0 over the last {decay} steps"


def publish(run_dir: Path, name: str, tokenizer_path: Path, dest_root: Path = PRETRAINED) -> dict[str, Any]:
    """Convert ``run_dir``'s checkpoint into ``dest_root/name`` and write its card."""
    train_cfg = json.loads((run_dir / "train_config.json").read_text())
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    step = json.loads((run_dir / "checkpoint" / "state.json").read_text())["step"]
    record = max((r for r in log if r["step"] <= step), key=lambda r: r["step"])
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    cfg = ToyConfig(
        train_cfg["n_layers"],
        train_cfg["n_heads"],
        train_cfg["d_model"],
        train_cfg["d_head"],
        tokenizer.get_vocab_size(),
        train_cfg["n_ctx"],
        d_mlp=train_cfg.get("d_mlp", 0),
        act_fn=train_cfg.get("act_fn", "gelu"),
        norm=train_cfg.get("norm", "none"),
    )
    module = ToyTransformer(cfg)
    module.load_state_dict(load_file(str(run_dir / "checkpoint" / "model.safetensors")))
    dest = dest_root / name
    export_model(module, tokenizer, dest, meta={})
    (dest / "training.json").unlink(missing_ok=True)
    model = CircuitModel.load(dest)
    corpus_path = tokenizer_path.parent / "corpus.json"
    card: dict[str, Any] = {
        "name": name,
        "command": _train_command(cfg, train_cfg, step, run_dir),
        "config": model.cfg.to_dict(),
        "training": {
            **{k: train_cfg[k] for k in ("lr", "batch_size", "n_ctx", "seed", "vocab_size")},
            "device": train_cfg.get("device", "cpu"),
            "decay_steps": train_cfg.get("decay_steps", 0),
            "steps": step,
            "tokens": step * train_cfg["batch_size"] * train_cfg["n_ctx"],
            # Evaluations are logged every eval_every steps: these figures are
            # those of the last evaluation at or before the published step.
            "evaluated_at_step": record["step"],
            "train_seconds": record["train_seconds"],
            "val_loss": record["val_loss"],
            "corpus": json.loads(corpus_path.read_text()) if corpus_path.exists() else {},
            "log": log,
        },
        "findings": measure_findings(model),
    }
    (dest / "card.json").write_text(json.dumps(card, indent=1, ensure_ascii=False))
    (dest / "README.md").write_text(_card_markdown(name, card) + _kept_sections(dest / "README.md"))
    return card


def main() -> None:
    """``python -m circuitwidgets.training.publish RUN_DIR NAME [--tokenizer PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("name")
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/cache/tokenizer.json"))
    args = parser.parse_args()
    card = publish(args.run_dir, args.name, args.tokenizer)
    print(json.dumps(card["findings"], indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
