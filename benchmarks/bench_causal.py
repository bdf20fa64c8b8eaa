"""Causal benchmark: activation-patching sweeps against TransformerLens and against the layer evaluations they need.

Shapes (random weights, built offline, float32):

- ``gpt2``: GPT-2-small, 12 layers × 12 heads, d_model 768, d_mlp 3,072, d_vocab 50,257, a Hugging Face
  ``GPT2LMHeadModel`` read by ``circuitwidgets.from_hf`` and bridged by TransformerLens
  (``TransformerBridge.boot_transformers``) from the same object; 2 prompts × 12 tokens (n_ctx 64);
- ``llama1b``: Llama-3.2-1B, 16 layers, 32 heads, 8 key/value heads, d_model 2,048, d_mlp 8,192,
  d_vocab 128,256, tied embeddings; a 128-token pair; ours only unless ``--tl`` (TransformerLens runs
  one whole forward per cell: 512 of them).

Sweeps, each one call of ``causal.patch`` with ``causal.logit_diff`` (TransformerLens: ``transformer_lens.patching``
with the same logit difference written as a plain function, the clean cache's run included in its time):

- ``resid_pre`` by layer × position (``get_act_patch_resid_pre``);
- ``pattern`` by layer × head (``get_act_patch_attn_head_pattern_all_pos``);
- ``z`` by layer × head (``get_act_patch_attn_head_out_all_pos``).

Each is checked for the same numbers (max |Δ| against TransformerLens) and set against its floor, the layer
evaluations no sweep can avoid: a cell at layer ``l`` needs ``batch`` prompts through layers ``l … L−1`` and the
final norm and unembedding at the metric's position (two ids). The floor is ``Σ_l (L − l) · t_layer(cells(l) ·
batch) + t_unembed``, with ``t_layer(n)`` one decoder layer of the Hugging Face model forward on ``n`` sequences
timed here, in the same run (best of 5, once per cell count: on a shared machine the best is the
least disturbed), and ``t_unembed`` the final norm plus the two unembedding columns of
every variant. Peak memory is the resident set above the level before the call (sampled every millisecond,
glibc made to return freed memory; torch allocations are invisible to tracemalloc), so the model's weights
are not counted.

Run from the repository root::

    nice -n 10 .venv/bin/python benchmarks/bench_causal.py                        # GPT-2 small, with TransformerLens
    .venv/bin/python benchmarks/bench_causal.py --no-tl --sweeps z                 # ours only, one sweep
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --shape llama1b         # Llama-3.2-1B shape, z only (long on 2 cores)

Prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]
import torch
from bench_engine import Measurement, measure

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub

import circuitwidgets as cw
from circuitwidgets import causal

#: sweep -> (our site, by, TransformerLens function)
SWEEPS = {
    "resid_pre": ("resid_pre", ("layer", "pos"), "get_act_patch_resid_pre"),
    "pattern": ("pattern", ("layer", "head"), "get_act_patch_attn_head_pattern_all_pos"),
    "z": ("z", ("layer", "head"), "get_act_patch_attn_head_out_all_pos"),
}


@dataclass(frozen=True)
class Shape:
    name: str
    n_pos: int
    sweeps: tuple[str, ...]
    tl_default: bool


SHAPES = {
    "gpt2": Shape("GPT-2-small shape, 2 prompts × 12 tokens", 12, ("resid_pre", "pattern", "z"), True),
    "llama1b": Shape("Llama-3.2-1B shape, 2 prompts × 128 tokens", 128, ("z",), False),
}


def build(key: str) -> Any:
    """The random Hugging Face model of ``key`` (float32, eval, eager attention)."""
    import transformers

    torch.manual_seed(0)
    if key == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=50257, n_positions=64, n_embd=768, n_layer=12, n_head=12, n_inner=3072
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=256, tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500_000.0, "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    model.config._attn_implementation = "eager"
    return model.eval()


def bridge_of(hf: Any) -> Any:
    """TransformerLens's bridge over the same Hugging Face object (a word-level tokenizer stands in)."""
    import transformers
    from tokenizers import Tokenizer, models
    from transformer_lens import TransformerBridge

    raw = Tokenizer(models.WordLevel({"w0": 0}, unk_token="w0"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="w0", unk_token="w0")
    return TransformerBridge.boot_transformers("local-bench", hf_model=hf, tokenizer=tokenizer).eval()


def decoder_layers(hf: Any) -> Any:
    return hf.transformer.h if hasattr(hf, "transformer") else hf.model.layers


def layer_seconds(hf: Any, n: int, n_pos: int, repeats: int = 5) -> float:
    """Best wall time of one decoder layer of ``hf`` forward on ``n`` sequences of ``n_pos`` tokens."""
    layer = decoder_layers(hf)[0]
    d = hf.config.hidden_size
    x = torch.randn(n, n_pos, d)
    kwargs: dict[str, Any] = {}
    if not hasattr(hf, "transformer"):  # Llama's layers take the rotary angles and a causal mask
        positions = torch.arange(n_pos)[None]
        kwargs["position_embeddings"] = hf.model.rotary_emb(x, positions)
        kwargs["attention_mask"] = torch.full((n_pos, n_pos), -math.inf).triu(1)[None, None]
    best = math.inf
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            layer(x, **kwargs)
            best = min(best, time.perf_counter() - start)
    return best


def unembed_seconds(hf: Any, n: int, repeats: int = 5) -> float:
    """The final norm and two unembedding columns at one position of ``n`` sequences."""
    norm = hf.transformer.ln_f if hasattr(hf, "transformer") else hf.model.norm
    W = hf.lm_head.weight[:2].detach()
    x = torch.randn(n, 1, hf.config.hidden_size)
    best = math.inf
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            norm(x) @ W.T
            best = min(best, time.perf_counter() - start)
    return best


def floor_seconds(hf: Any, cells_per_layer: int, batch: int, n_pos: int) -> float:
    """``Σ_l (L − l) · t_layer(cells · batch) + L · t_unembed(cells · batch)`` (module docstring)."""
    L = len(decoder_layers(hf))
    t_layer = layer_seconds(hf, cells_per_layer * batch, n_pos)
    t_unembed = unembed_seconds(hf, cells_per_layer * batch)
    return sum((L - layer) * t_layer for layer in range(L)) + L * t_unembed


def tl_metric(correct: torch.Tensor, wrong: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    rows = torch.arange(correct.shape[0])

    def logit_diff(logits: torch.Tensor) -> torch.Tensor:
        return (logits[rows, -1, correct] - logits[rows, -1, wrong]).mean()

    return logit_diff


def tl_sweep(bridge: Any, fn: str, clean: torch.Tensor, corrupted: torch.Tensor, metric: Any) -> np.ndarray:
    from transformer_lens import patching

    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean)
        return getattr(patching, fn)(bridge, corrupted, cache, metric).numpy()  # type: ignore[no-any-return]


Row = tuple[str, Measurement, float, Measurement | None, str]


def run(key: str, use_tl: bool, sweeps: list[str]) -> list[Row]:
    shape = SHAPES[key]
    print(f"{shape.name}: building the model", file=sys.stderr, flush=True)
    hf = build(key)
    ours = cw.from_hf(hf)
    bridge = bridge_of(hf) if use_tl else None
    V = hf.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(100, V, (2, shape.n_pos), generator=gen)
    corrupted = clean.clone()
    corrupted[:, shape.n_pos // 2] = torch.randint(100, V, (2,), generator=gen)
    correct, wrong = clean[:, -1], torch.tensor([17, 17])
    metric = causal.logit_diff(correct.tolist(), wrong.tolist())
    from circuitwidgets.causal.engine import SWEEP_MEMORY_BUDGET, chunk_size

    chunk = chunk_size(ours, 2, shape.n_pos, SWEEP_MEMORY_BUDGET)
    print(f"  variants per pass (1 GiB budget): {chunk}", file=sys.stderr, flush=True)
    rows: list[Row] = []
    floors: dict[int, float] = {}
    for name in sweeps:
        site, by, fn = SWEEPS[name]
        cells = shape.n_pos if "pos" in by else ours.cfg.n_heads
        if cells not in floors:
            floors[cells] = floor_seconds(hf, cells, 2, shape.n_pos)
        floor = floors[cells]
        print(f"  floor {name}: {floor:.2f} s", file=sys.stderr, flush=True)
        mine = measure(lambda s=site, b=by: causal.patch(ours, clean, corrupted, metric, site=s, by=b), f"ours {name}")
        theirs = None
        note = f"{ours.cfg.n_layers * cells} cells"
        if bridge is not None:
            theirs = measure(
                lambda f=fn: tl_sweep(bridge, f, clean, corrupted, tl_metric(correct, wrong)), f"TransformerLens {name}"
            )
            delta = float(np.abs(np.asarray(mine.result) - theirs.result).max())
            note += f"; max |Δ| {delta:.1e}; ours {theirs.seconds / mine.seconds:.1f}× faster"
        rows.append((f"`{site}` by {' × '.join(by)}", mine, floor, theirs, note))
        gc.collect()
    return rows


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n### {title}\n")
    print("| sweep | circuitwidgets | peak extra | floor | ratio to floor | TransformerLens | TL peak extra | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for task, mine, floor, tl, note in rows:
        tl_t, tl_m = ("—", "—") if tl is None else (f"{tl.seconds:.2f} s", f"{tl.peak_bytes / 2**20:,.0f} MB")
        print(
            f"| {task} | {mine.seconds:.2f} s | {mine.peak_bytes / 2**20:,.0f} MB | {floor:.2f} s | "
            f"{mine.seconds / floor:.2f}× | {tl_t} | {tl_m} | {note} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="gpt2", choices=sorted(SHAPES))
    parser.add_argument("--sweeps", default=None, help="comma-separated: resid_pre, pattern, z (default per shape)")
    parser.add_argument("--no-tl", action="store_true", help="skip TransformerLens")
    parser.add_argument("--tl", action="store_true", help="run TransformerLens on llama1b too (512 whole forwards)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's choice)")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    sweeps = args.sweeps.split(",") if args.sweeps else list(shape.sweeps)
    unknown = sorted(set(sweeps) - set(SWEEPS))
    if unknown:
        parser.error(f"--sweeps: expected some of {', '.join(SWEEPS)}, got {', '.join(unknown)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    use_tl = not args.no_tl and (shape.tl_default or args.tl)
    print(
        f"machine: {torch.get_num_threads()} torch threads, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
        f"device cpu; float32"
    )
    rows = run(args.shape, use_tl, sweeps)
    print_table(shape.name, rows)
    if args.shape == "llama1b":
        print(
            "\nMemory: the weights are 4.9 GB in float32 (held twice while the Hugging Face model is alive); "
            "a sweep adds its 1 GiB variant budget and the base runs' caches."
        )


if __name__ == "__main__":
    main()
