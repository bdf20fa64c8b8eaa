"""Run hannamw/EAP-IG (the reference implementation of EAP and EAP-IG) on a random model, for benchmarks/bench_eap.py.

Runs in the reference's own environment, never ours: EAP-IG is not on PyPI and needs TransformerLens < 4
(``HookedTransformer``), which ours excludes. Build it with ``benchmarks/bench_eap.py``'s docstring; this script
imports nothing from circuitwidgets.

``build OUT``: a TransformerLens ``HookedTransformer`` from a config (GPT-2-small's shape unless told otherwise)
with random weights (TransformerLens's initialisation, plus random norm weights and biases so that folding them
is exercised), random prompt pairs of one length, and the reference's ``attribute`` scores for each method named,
written to ``OUT``: ``model.safetensors`` (the state dict), ``data.safetensors`` (tokens and answers) and
``scores.json`` (per method, the reference's edge names with their scores).

``pairs OUT --pairs N``: rewrite the prompt pairs with ``N`` pairs (for timing).

``time OUT METHOD``: the same model in float32, the reference's ``attribute`` on the same pairs in batches; prints
JSON: wall seconds, this process's peak resident memory and its resident memory before attributing.

Two things of the reference are adapted around it, not changed: its score tensors are allocated on ``"cuda"``
(a proxy of ``torch`` as its module sees it puts them on the CPU), and it tokenizes strings with the model's
tokenizer (a config-built model has none: its ``tokenize_plus`` is given the token ids, all of one length, so the
attention mask is all ones as the tokenizer would make it).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import types
from pathlib import Path
from typing import Any

import eap.attribute as attribute_module
import torch
from eap.graph import Graph
from live_rss import LiveRSS  # (this script's folder, standard library only)
from safetensors.torch import load_file, save_file
from transformer_lens import HookedTransformer, HookedTransformerConfig

GPT2_SMALL = {"n_layers": 12, "d_model": 768, "n_heads": 12, "d_head": 64, "d_mlp": 3072, "d_vocab": 50257,
              "n_ctx": 1024, "act_fn": "gelu_new", "normalization_type": "LN"}  # fmt: skip


class _CpuTorch(types.ModuleType):
    """``torch`` as the reference's module sees it, except that tensors it asks for on ``"cuda"`` are on the CPU."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") == "cuda" and not torch.cuda.is_available():
            kwargs["device"] = "cpu"
        return torch.zeros(*args, **kwargs)


def _tokens_as_given(
    model: HookedTransformer, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The reference's ``tokenize_plus`` for prompts already tokenized, all of one length."""
    mask = torch.ones_like(tokens)
    return tokens, mask, mask.sum(1), tokens.shape[1]


attribute_module.torch = _CpuTorch()  # type: ignore[attr-defined]
attribute_module.tokenize_plus = _tokens_as_given  # type: ignore[assignment]


def logit_diff(
    logits: torch.Tensor, clean_logits: torch.Tensor, input_lengths: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """The reference's metric signature: mean over the batch of ``logit[correct] − logit[wrong]`` at the last position."""
    last = logits[torch.arange(logits.shape[0]), input_lengths - 1]
    return (last.gather(1, labels[:, :1]) - last.gather(1, labels[:, 1:])).mean()


def _model(shape: dict[str, Any], dtype: torch.dtype, seed: int) -> HookedTransformer:
    cfg = HookedTransformerConfig(**shape, dtype=dtype, seed=seed, device="cpu")
    model = HookedTransformer(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".b") or ".b_" in name or name.startswith("unembed.b"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            elif name.endswith(".w"):  # a norm's scale
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    model.cfg.use_attn_result = True
    model.cfg.use_split_qkv_input = True
    model.cfg.use_hook_mlp_in = True
    model.setup()  # (the hooks these flags add)
    return model.eval()


def _pairs(d_vocab: int, n: int, n_pos: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 2)
    clean = torch.randint(1, d_vocab, (n, n_pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, 1 : n_pos // 2] = torch.randint(1, d_vocab, (n, n_pos // 2 - 1), generator=g)
    answers = torch.randint(1, d_vocab, (n, 2), generator=g)
    return {"clean": clean, "corrupted": corrupted, "answers": answers}


def _batches(data: dict[str, torch.Tensor], batch: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    n = data["clean"].shape[0]
    return [(data["clean"][i : i + batch], data["corrupted"][i : i + batch], data["answers"][i : i + batch])
            for i in range(0, n, batch)]  # fmt: skip


def _attribute(model: HookedTransformer, data: dict[str, torch.Tensor], method: str, steps: int, batch: int) -> Graph:
    graph = Graph.from_model(model)
    attribute_module.attribute(model, graph, _batches(data, batch), logit_diff, method, ig_steps=steps, quiet=True)
    return graph


def build(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shape = GPT2_SMALL | json.loads(args.shape)
    model = _model(shape, torch.float64, args.seed)
    data = _pairs(shape["d_vocab"], args.pairs, args.pos, args.seed)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    save_file(data, str(out / "data.safetensors"))
    scores = {}
    for method in filter(None, args.methods.split(",")):
        # the functions ``attribute`` calls, for their float64 score matrix (``attribute`` stores it in the graph's
        # float32 one)
        graph = Graph.from_model(model)
        batches = _batches(data, args.batch)
        if method == "EAP":
            matrix = attribute_module.get_scores_eap(model, graph, batches, logit_diff, quiet=True)
        else:
            matrix = attribute_module.get_scores_eap_ig(model, graph, batches, logit_diff, steps=args.steps, quiet=True)
        scores[method] = [[name, float(matrix[edge.matrix_index])] for name, edge in graph.edges.items()]
    logits = model(data["clean"][:2])
    meta = {"shape": shape, "seed": args.seed, "steps": args.steps, "batch": args.batch, "scores": scores,
            "logits": logits[:, -1, :50].tolist()}  # fmt: skip
    (out / "scores.json").write_text(json.dumps(meta))


def more_pairs(args: argparse.Namespace) -> None:
    """Rewrite ``data.safetensors`` with ``--pairs`` pairs (for timing; the model stays as built)."""
    out = Path(args.out)
    meta = json.loads((out / "scores.json").read_text())
    save_file(_pairs(meta["shape"]["d_vocab"], args.pairs, args.pos, meta["seed"]), str(out / "data.safetensors"))


def timing(args: argparse.Namespace) -> None:
    out = Path(args.out)
    meta = json.loads((out / "scores.json").read_text())
    torch.set_num_threads(args.threads)
    model = _model(meta["shape"], torch.float32, meta["seed"])
    model.load_state_dict({k: v.float() for k, v in load_file(str(out / "model.safetensors")).items()})
    data = load_file(str(out / "data.safetensors"))
    if args.pairs:
        data = {k: v[: args.pairs] for k, v in data.items()}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with LiveRSS() as live:
        t0, c0 = time.perf_counter(), time.process_time()
        _attribute(model, data, args.method, args.steps, args.batch)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_rss": peak, "rss_before": before, "pairs": int(data["clean"].shape[0]),
                      "live_above": live.above, "threads": torch.get_num_threads(), "torch": torch.__version__}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("--shape", default="{}", help="JSON overriding GPT-2-small's config entries")
    b.add_argument("--pairs", type=int, default=8)
    b.add_argument("--pos", type=int, default=16)
    b.add_argument("--batch", type=int, default=4)
    b.add_argument("--steps", type=int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--methods", default="EAP,EAP-IG-inputs", help="EAP and/or EAP-IG-inputs")
    m = sub.add_parser("pairs")
    m.add_argument("out")
    m.add_argument("--pairs", type=int, default=100)
    m.add_argument("--pos", type=int, default=16)
    t = sub.add_parser("time")
    t.add_argument("out")
    t.add_argument("method")
    t.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    t.add_argument("--batch", type=int, default=25)
    t.add_argument("--steps", type=int, default=5)
    t.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    {"build": build, "pairs": more_pairs, "time": timing}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
