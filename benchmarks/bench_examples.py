"""Max-activating examples: circuitwidgets' streaming pass against the same loop in TransformerLens, same weights.

A random GPT-2-style model at gelu-2l's shape (2 layers, 8 heads, d_model 256,
d_mlp 1,024, d_vocab 2,048) built with Hugging Face ``transformers``; ours is
``circuitwidgets.from_hf`` of it, TransformerLens's ``TransformerBridge`` wraps
the same object, so both read the same weights. The corpus: held-out standard
library code tokenised with gelu-2l's tokenizer, ``--rows`` rows of 128 tokens.

For the neurons of layer 1 (``mlp_post``) and the heads of layer 1 (the norm of
each head's write ``z_h W_O^h``):

- **TransformerLens**: the loop a user writes: per batch
  ``run_with_cache(names_filter=hook, stop_at_layer=2)``, then the running top-k
  per unit (``torch.cat`` of the kept and the batch's activations, ``topk``);
- **circuitwidgets**: ``features.max_activating`` (top-k with context windows,
  a random sample of active tokens with theirs, the histogram) over the same rows.

Both keep the top 20 per unit and must find the same top activations (checked).
Each loop runs ``--repeats`` times after a one-batch warm-up, alternating; the
fastest run counts. The forward pass alone (to the activation read) is timed
too, to separate the model from the bookkeeping.
Run from the repository root::

    nice -n 10 .venv/bin/python benchmarks/bench_examples.py --rows 256 --threads 2

Prints a markdown table (tokens per second, ratio ours / TransformerLens) and the load average.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import torch

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.features.examples import unit_activations
from circuitwidgets.training.corpus import load_stdlib_corpus

K = 20


def build() -> Any:
    """The random GPT-2-style model at gelu-2l's shape (float32, eval, eager attention)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=2048, n_positions=256, n_embd=256, n_layer=2, n_head=8, n_inner=1024)
    model = transformers.GPT2LMHeadModel(config)
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


def corpus(rows: int, n_ctx: int = 128) -> torch.Tensor:
    """``[rows, n_ctx]`` held-out standard-library tokens (gelu-2l's tokenizer), each row after a BOS."""
    tokenizer = cw.load_pretrained("gelu-2l").tokenizer
    ids: list[int] = []
    for text in load_stdlib_corpus().val:
        ids.extend(tokenizer.encode(text))
        if len(ids) >= rows * (n_ctx - 1):
            break
    body = torch.tensor(ids[: rows * (n_ctx - 1)]).view(rows, n_ctx - 1)
    return torch.cat([torch.zeros(rows, 1, dtype=torch.long), body], dim=1)


def tl_loop(bridge: Any, tokens: torch.Tensor, hook: str, read: Any, batch: int) -> tuple[np.ndarray, float]:
    """TransformerLens: running top-K per unit over batches; ``(top values [K, n_units], seconds)``."""
    start = time.perf_counter()
    best: torch.Tensor | None = None
    with torch.no_grad():
        for first in range(0, len(tokens), batch):
            _, cache = bridge.run_with_cache(tokens[first : first + batch], names_filter=hook, stop_at_layer=2)
            acts = read(cache[hook]).reshape(-1, read(cache[hook]).shape[-1])
            pool = acts if best is None else torch.cat([best, acts])
            best = pool.topk(K, dim=0).values
    assert best is not None
    return best.numpy(), time.perf_counter() - start


def forward_seconds(run: Any, tokens: torch.Tensor, batch: int) -> float:
    """Wall time of ``run(batch)`` over every batch (the forward pass alone, to the activation read)."""
    start = time.perf_counter()
    with torch.no_grad():
        for first in range(0, len(tokens), batch):
            run(tokens[first : first + batch])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="each loop runs this many times; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf = build()
    ours = cw.from_hf(hf)
    bridge = bridge_of(hf)
    tokens = corpus(args.rows)
    W_O = ours.W_O[1]  # [heads, d_head, d_model]
    cases = {
        "neurons L1 (mlp_post)": (features.neurons(ours, 1), "blocks.1.mlp.hook_post", lambda x: x),
        "heads L1 (‖z_h W_O^h‖)": (
            features.head_outputs(ours, 1),
            "blocks.1.attn.hook_z",
            lambda z: torch.einsum("bphd,hdm->bphm", z, W_O).norm(dim=-1),
        ),
    }
    print(f"{args.rows} rows × 128 tokens = {tokens.numel():,} tokens, batch {args.batch}, {args.threads} threads")
    print(
        "| units | TransformerLens loop (top-k) | circuitwidgets max_activating (top-k + windows, sample, histogram) "
        "| ratio | forward alone: TL / ours |"
    )
    print("|---|---|---|---|---|")
    for name, (units, hook, read) in cases.items():
        tl_loop(bridge, tokens[: args.batch], hook, read, args.batch)  # (warm-up: first calls allocate)
        features.max_activating(ours, tokens[: args.batch], units, k=K, batch_size=args.batch, progress=False)
        tl_top, tl_s = tl_loop(bridge, tokens, hook, read, args.batch)
        ex = features.max_activating(ours, tokens, units, k=K, batch_size=args.batch, progress=False)
        ours_s = ex.seconds
        for _ in range(args.repeats - 1):  # (alternating, so a burst of load falls on both)
            tl_s = min(tl_s, tl_loop(bridge, tokens, hook, read, args.batch)[1])
            ours_s = min(
                ours_s, features.max_activating(ours, tokens, units, k=K, batch_size=args.batch, progress=False).seconds
            )
        np.testing.assert_allclose(ex.top_value.T, tl_top, rtol=1e-4, atol=1e-4)  # (the same top activations)
        tl_fwd = forward_seconds(
            lambda t, hook=hook: bridge.run_with_cache(t, names_filter=hook, stop_at_layer=2), tokens, args.batch
        )
        our_fwd = forward_seconds(lambda t, units=units: unit_activations(ours, units, t), tokens, args.batch)
        n = tokens.numel()
        print(
            f"| {name} | {n / tl_s:,.0f} tokens/s ({tl_s:.1f} s) | {n / ours_s:,.0f} tokens/s ({ours_s:.1f} s) "
            f"| {tl_s / ours_s:.2f}× | {tl_fwd:.1f} s / {our_fwd:.1f} s |"
        )
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
