"""Causal benchmark: the issue's table — activation-patching sweeps against TransformerLens 4.3 and against their floor.

Shapes (random Hugging Face GPT-2 weights built offline, float32, read by ``circuitwidgets.from_hf`` and bridged
by TransformerLens ``TransformerBridge.boot_transformers`` from the same object):

- ``tiny``: 2 layers × 4 heads, d_model 64, d_vocab 512, 8 prompts × 20 tokens: every site and ``by`` that
  TransformerLens's ``patching`` module has (13 sweeps);
- ``medium``: 4 layers × 8 heads, d_model 256, d_vocab 2,048, 8 prompts × 32 tokens: ``z`` by layer × pos × head and
  ``resid_pre`` by layer × pos; and the induction study: 8 prompts of 25 random tokens repeated (50), ``z`` by
  layer × head under a corruption of the first half, the metric the mean log-prob of the next token over 49
  positions written as a Python function (TransformerLens: the same function through its ``patching`` hook loop;
  ours: the function as given, and the same metric declared, ``causal.loss``);
- ``gpt2``: GPT-2-small, 12 layers × 12 heads, d_model 768, d_vocab 50,257, 2 prompts × 12 tokens:
  ``resid_pre`` by layer × pos, ``pattern`` and ``z`` by layer × head;
- ``llama1b`` (only when asked): Llama-3.2-1B's shape, ``z`` by layer × head on a 128-token pair, ours only.

Every sweep runs with default settings (``memory_budget`` default, the metric ``causal.logit_diff`` at the last
position unless stated), checked for the same numbers as TransformerLens (max |Δ|).

**The floor** of a sweep is the least work any exact patching must do, counted in FLOPs and timed at the rate this
machine runs one Hugging Face decoder layer of the same model (best of 3, measured in the same run on the sweep's
own token count): for each cell at layer ``l`` whose patch starts at position ``p`` (``p = 0`` for cells that do not
split positions), ``batch`` prompts through layers ``l … L−1`` at positions ``p … P−1`` only (earlier positions are
unchanged by causal attention), attending to every earlier key; in the last layer the keys and values of those
positions and the rest of the layer only at the positions the metric reads; then the final norm and the metric's
logits. A ratio to the floor above 1 is overhead (Python, hooks, the per-pass set-up, tensors below the machine's
best size); the floor's rate is the best a layer reaches here, so the ratio is not below 1 by construction except
for noise.

Peak memory is the resident set above the level before the call, sampled every millisecond.

Run from the repository root (the machine's load, ``uptime``, is printed; on a shared machine figures are noisy)::

    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1        # tiny, medium, GPT-2-small, with TL
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1 --shapes medium --sweeps z --no-forward  # one row
    .venv/bin/python benchmarks/bench_causal.py --shapes gpt2 --no-tl          # one shape, ours only
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --shapes llama1b    # Llama-3.2-1B shape, z only (long)

Prints the issue's table in markdown. Not part of the test suite.

Measured (2026-11-28, this repository's h-speed branch; 2 shared cores, load average 13–23 (about 7
engineers' test runs) until GPT-2's ``pattern`` and ``z`` rows, which ran at about 3; so every figure is the median **CPU time** of this process at 1 thread, which other processes
disturb far less than wall time; wall medians in the last column are 20–40× longer). Four processes, one per row
group, ``--threads 1 --repeats 2`` (``--repeats 1`` for the medium ``z`` row: TL's sweep alone is 78–129 CPU s)::

    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1 --repeats 2 --shapes tiny --forward tiny,medium
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1 --repeats 2 --shapes medium --sweeps resid_pre,induction --no-forward
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1 --repeats 1 --shapes medium --sweeps z --no-forward
    nice -n 10 .venv/bin/python benchmarks/bench_causal.py --threads 1 --repeats 2 --shapes gpt2 --no-forward

| shape | sweep | ours | TL 4.3 | TL / ours | goal | floor | ours / floor | max abs Δ | peak extra | wall: ours, TL |
|---|---|---|---|---|---|---|---|---|---|---|
| tiny (2L, 4H, d 64, 8 × 20) | `resid_pre` by layer × pos | 0.09 s | 0.40 s | 4.65× | ≥ 3× faster | 0.030 s | 2.86× | 1.8e-07 | 3 MB | 3.84 s, 11.61 s |
| tiny (2L, 4H, d 64, 8 × 20) | `resid_mid` by layer × pos | 0.08 s | 0.38 s | 4.69× | ≥ 3× faster | 0.030 s | 2.69× | 1.2e-07 | 3 MB | 1.82 s, 8.58 s |
| tiny (2L, 4H, d 64, 8 × 20) | `attn_out` by layer × pos | 0.08 s | 0.44 s | 5.62× | ≥ 3× faster | 0.030 s | 2.65× | 1.2e-07 | 3 MB | 2.50 s, 13.12 s |
| tiny (2L, 4H, d 64, 8 × 20) | `mlp_out` by layer × pos | 0.07 s | 0.39 s | 5.20× | ≥ 3× faster | 0.030 s | 2.51× | 6.0e-08 | 4 MB | 2.04 s, 12.06 s |
| tiny (2L, 4H, d 64, 8 × 20) | `z` by layer × head | 0.04 s | 0.11 s | 2.97× | ≥ 3× faster | 0.011 s | 3.31× | 6.0e-08 | 5 MB | 0.91 s, 2.47 s |
| tiny (2L, 4H, d 64, 8 × 20) | `z` by layer × pos × head | 0.21 s | 1.57 s | 7.57× | ≥ 3× faster | 0.119 s | 1.73× | 1.8e-07 | 7 MB | 3.97 s, 43.17 s |
| tiny (2L, 4H, d 64, 8 × 20) | `q` by layer × head | 0.03 s | 0.10 s | 3.58× | ≥ 3× faster | 0.011 s | 2.55× | 6.0e-08 | 3 MB | 0.85 s, 3.28 s |
| tiny (2L, 4H, d 64, 8 × 20) | `k` by layer × head | 0.02 s | 0.09 s | 3.66× | ≥ 3× faster | 0.011 s | 2.20× | 6.0e-08 | 5 MB | 0.38 s, 2.22 s |
| tiny (2L, 4H, d 64, 8 × 20) | `v` by layer × head | 0.02 s | 0.09 s | 3.52× | ≥ 3× faster | 0.011 s | 2.33× | 6.0e-08 | 5 MB | 0.78 s, 2.73 s |
| tiny (2L, 4H, d 64, 8 × 20) | `q` by layer × pos × head | 0.21 s | 1.59 s | 7.74× | ≥ 3× faster | 0.119 s | 1.73× | 1.2e-07 | 5 MB | 5.85 s, 51.60 s |
| tiny (2L, 4H, d 64, 8 × 20) | `k` by layer × pos × head | 0.19 s | 1.58 s | 8.20× | ≥ 3× faster | 0.119 s | 1.61× | 1.2e-07 | 5 MB | 6.44 s, 50.85 s |
| tiny (2L, 4H, d 64, 8 × 20) | `pattern` by layer × head | 0.05 s | 0.10 s | 1.86× | ≥ 3× faster | 0.011 s | 5.00× | 1.2e-07 | 5 MB | 1.62 s, 3.38 s |
| medium (4L, 8H, d 256, 8 × 32) | `resid_pre` by layer × pos | 2.57 s | 12.95 s | 5.04× | ≥ 4× faster | 1.685 s | 1.53× | 3.6e-07 | 32 MB | 69.89 s, 382.33 s |
| medium (8 × 50, induction) | `z` by layer × head, Python-function metric over 49 positions | 3.04 s | 6.41 s | 2.11× | ≥ 3× faster than hand-written TL hooks | 1.864 s | 1.63× | 1.4e-06 | 38 MB | 80.06 s, 120.73 s |
| medium (8 × 50, induction) | the same, metric declared (`causal.loss`) | 2.98 s | 6.41 s | 2.15× | ≥ 3× faster than hand-written TL hooks | 1.864 s | 1.60× | 9.5e-07 | 36 MB | 68.39 s, 120.73 s |
| medium (4L, 8H, d 256, 8 × 32) | `z` by layer × pos × head | 21.85 s | 129.01 s | 5.91× | ≥ 4× faster | 13.583 s | 1.61× | 4.8e-07 | 244 MB | 513.36 s, 1425.51 s |
| GPT-2-small (12L, 12H, d 768, V 50,257, 2 × 12) | `resid_pre` by layer × pos | 7.89 s | 45.31 s | 5.74× | ≥ 8× (resid_pre), ≥ 5× (pattern, z) | 3.248 s | 2.43× | 1.5e-06 | 16 MB | 227.74 s, 664.56 s |
| GPT-2-small (12L, 12H, d 768, V 50,257, 2 × 12) | `pattern` by layer × head | 7.19 s | 36.48 s | 5.07× | ≥ 8× (resid_pre), ≥ 5× (pattern, z) | 5.933 s | 1.21× | 1.9e-06 | 15 MB | 12.47 s, 57.38 s |
| GPT-2-small (12L, 12H, d 768, V 50,257, 2 × 12) | `z` by layer × head | 6.04 s | 33.89 s | 5.61× | ≥ 8× (resid_pre), ≥ 5× (pattern, z) | 5.933 s | 1.02× | 1.9e-06 | 16 MB | 6.16 s, 34.91 s |
| tiny (2L, 4H, d 64, 8 × 20) | `pattern` by layer × head × pos | 0.35 s | 1.69 s | 4.80× | ≥ 3× faster | 0.119 s | 2.95× | 1.2e-07 | 5 MB | 10.59 s, 59.92 s |
| tiny, 200 × 64 tokens | forward pass | 0.34 s | 0.52 s | 1.56× | ≥ 1× | 0.482 s | 0.70× | 3.6e-07 | 57 MB | 10.48 s, 17.78 s |
| medium, 200 × 64 tokens | forward pass | 3.24 s | 5.15 s | 1.59× | ≥ 1× | 4.251 s | 0.76× | 1.2e-06 | 238 MB | 85.63 s, 101.95 s |

The tiny shape's cells take 20–50 ms of CPU, near the clock's resolution on a loaded machine: read its ratios to
±30%. The forward pass beats the floor (ours / floor below 1) because the floor's rate is Hugging Face's layer,
which ours now outruns (fused LayerNorm, the heads' sum as one product, fused GELU).

``resid_pre`` on GPT-2-small at 5.7× falls short of 8× (2.4× its floor): with
2 × 12 tokens a pass's products have a few dozen rows against 768 × 3,072 weights, so each pass reads the layers'
weights (28 MB a layer) for little arithmetic, and the suffix-only split (at least 4 passes a layer) multiplies those
reads; the 8× goal needs that trade re-tuned for short prompts (untried here).

Not reached, and why: the induction study (2.1× against 3×): its metric reads 49 of 50 positions, so nothing narrows
and each variant pays its layers and the full unembedding; TL's time over the floor is 3.4× here, so 3× needs the
sweep within 1.13× of the floor (it is at 1.6×: small passes of 8 × 50 tokens run below the layer's best rate).
``pattern`` by layer × head on the tiny shape (1.9×): 8 cells of 20 ms, dominated by per-pass set-up.

Max-activating examples (``benchmarks/bench_examples.py --rows 64 --threads 1``, same session, wall time, the
faster of 2 runs at load about 20): neurons of layer 1 1.01× TransformerLens's loop, heads of layer 1 2.41×.
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
import torch
from bench_engine import PeakRSS

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub

import circuitwidgets as cw
from circuitwidgets import causal

#: TransformerLens's patching function for each (site, by) it has.
TL_FUNCTIONS = {
    ("resid_pre", ("layer", "pos")): "get_act_patch_resid_pre",
    ("resid_mid", ("layer", "pos")): "get_act_patch_resid_mid",
    ("attn_out", ("layer", "pos")): "get_act_patch_attn_out",
    ("mlp_out", ("layer", "pos")): "get_act_patch_mlp_out",
    ("z", ("layer", "head")): "get_act_patch_attn_head_out_all_pos",
    ("z", ("layer", "pos", "head")): "get_act_patch_attn_head_out_by_pos",
    ("q", ("layer", "head")): "get_act_patch_attn_head_q_all_pos",
    ("k", ("layer", "head")): "get_act_patch_attn_head_k_all_pos",
    ("v", ("layer", "head")): "get_act_patch_attn_head_v_all_pos",
    ("q", ("layer", "pos", "head")): "get_act_patch_attn_head_q_by_pos",
    ("k", ("layer", "pos", "head")): "get_act_patch_attn_head_k_by_pos",
    ("pattern", ("layer", "head")): "get_act_patch_attn_head_pattern_all_pos",
    ("pattern", ("layer", "head", "pos")): "get_act_patch_attn_head_pattern_by_pos",
}


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    heads: int
    d_model: int
    vocab: int
    batch: int
    n_pos: int
    sweeps: tuple[tuple[str, tuple[str, ...]], ...]
    goal: str
    induction: bool = False


SHAPES = {
    "tiny": Shape("tiny (2L, 4H, d 64, 8 × 20)", 2, 4, 64, 512, 8, 20, tuple(TL_FUNCTIONS), "≥ 3× faster"),
    "medium": Shape(
        "medium (4L, 8H, d 256, 8 × 32)", 4, 8, 256, 2048, 8, 32,
        (("z", ("layer", "pos", "head")), ("resid_pre", ("layer", "pos"))), "≥ 4× faster", induction=True,
    ),
    "gpt2": Shape(
        "GPT-2-small (12L, 12H, d 768, V 50,257, 2 × 12)", 12, 12, 768, 50257, 2, 12,
        (("resid_pre", ("layer", "pos")), ("pattern", ("layer", "head")), ("z", ("layer", "head"))),
        "≥ 8× (resid_pre), ≥ 5× (pattern, z)",
    ),
}  # fmt: skip


def build(shape: Shape) -> Any:
    """The random GPT-2-style Hugging Face model of ``shape`` (float32, eval, eager attention)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=shape.vocab, n_positions=64, n_embd=shape.d_model, n_layer=shape.layers, n_head=shape.heads,
        n_inner=4 * shape.d_model, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    return model.eval()


def build_llama1b() -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=256, tie_word_embeddings=True,
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


# ---------------------------------------------------------------------------------------------------- the floor
@dataclass(frozen=True)
class Counts:
    """FLOPs per token of one GPT-2-style decoder layer's parts (a multiply-add is 2 FLOPs)."""

    kv: float  # key and value projections
    rest: float  # query and output projections, the MLP
    per_key: float  # scores and mixing, per key attended

    @staticmethod
    def of(hf: Any) -> Counts:
        c = hf.config
        d = c.hidden_size
        inner = getattr(c, "n_inner", None) or getattr(c, "intermediate_size", None) or 4 * d
        gated = 3 if hasattr(c, "intermediate_size") else 2
        return Counts(kv=2 * 2 * d * d, rest=2 * 2 * d * d + 2 * gated * d * inner, per_key=2 * 2 * d)


def floor_flops(hf: Any, counts: Counts, starts: dict[int, list[int]], batch: int, n_pos: int, read: int) -> float:
    """The floor's FLOPs: ``starts[l]`` holds each cell of layer ``l``'s first recomputed position (module docstring)."""
    L = hf.config.num_hidden_layers if hasattr(hf.config, "num_hidden_layers") else hf.config.n_layer
    d, V = hf.config.hidden_size, 2  # the metric's two logits
    total = 0.0
    for layer, firsts in starts.items():
        for p in firsts:
            for j in range(layer, L):
                tokens = range(p, n_pos)
                if j == L - 1:  # keys and values of the suffix; the rest only where the metric reads
                    total += len(tokens) * counts.kv + read * (counts.rest + counts.per_key * n_pos)
                else:
                    total += sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in tokens)
            total += read * 2 * d * V
    return batch * total


def layer_rate(hf: Any, n: int, n_pos: int, counts: Counts, repeats: int = 3) -> float:
    """FLOPs per CPU second of one Hugging Face decoder layer on ``n`` sequences of ``n_pos`` tokens (best of ``repeats``)."""
    layer = hf.transformer.h[0] if hasattr(hf, "transformer") else hf.model.layers[0]
    x = torch.randn(n, n_pos, hf.config.hidden_size)
    kwargs: dict[str, Any] = {}
    if not hasattr(hf, "transformer"):
        kwargs["position_embeddings"] = hf.model.rotary_emb(x, torch.arange(n_pos)[None])
        kwargs["attention_mask"] = torch.full((n_pos, n_pos), -math.inf).triu(1)[None, None]
    flops = n * sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in range(n_pos))
    best = math.inf
    with torch.no_grad():
        for _ in range(repeats):
            start = time.process_time()
            layer(x, **kwargs)
            best = min(best, time.process_time() - start)
    return flops / best


def starts_of(site: str, by: tuple[str, ...], L: int, H: int, n_pos: int) -> dict[int, list[int]]:
    """Each cell's first position that must be recomputed, by layer."""
    per_pos = "pos" in by
    heads = H if "head" in by else 1
    return {layer: [p for p in range(n_pos) for _ in range(heads)] if per_pos else [0] * heads for layer in range(L)}


# ---------------------------------------------------------------------------------------------------------- runs
@dataclass
class Measurement:
    """Result, median CPU and wall seconds over the repeats, and the first call's peak extra RSS."""

    result: Any
    seconds: float  # median CPU seconds of this process (1 thread: the work, much less disturbed by other processes)
    wall: float  # median wall seconds
    peak_bytes: int


#: Calls per measurement (``--repeats``); the median counts.
REPEATS = [3]


def measure(fn: Callable[[], Any], label: str) -> Measurement:
    """Call ``fn`` :data:`REPEATS` times: median CPU and wall seconds, peak extra memory of the first (stderr progress)."""
    cpu, wall = [], []
    with PeakRSS() as rss:
        result = _timed(fn, cpu, wall)
    for _ in range(REPEATS[0] - 1):
        _timed(fn, cpu, wall)
    m = Measurement(result, float(np.median(cpu)), float(np.median(wall)), rss.peak)
    print(f"  {label}: CPU {', '.join(f'{c:.2f}' for c in cpu)} s (wall median {m.wall:.2f} s), "
          f"peak extra {rss.peak / 2**20:.0f} MB", file=sys.stderr, flush=True)  # fmt: skip
    return m


def _timed(fn: Callable[[], Any], cpu: list[float], wall: list[float]) -> Any:
    start, clock = time.process_time(), time.perf_counter()
    result = fn()
    cpu.append(time.process_time() - start)
    wall.append(time.perf_counter() - clock)
    return result


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


@dataclass
class Row:
    shape: str
    sweep: str
    ours: Measurement
    floor: float
    tl: Measurement | None
    delta: float | None
    goal: str


#: ``--sweeps``: the site names (and ``induction``) to run; empty for all.
ONLY: set[str] = set()


def run_shape(key: str, use_tl: bool) -> list[Row]:
    shape = SHAPES[key]
    print(f"{shape.name}: building", file=sys.stderr, flush=True)
    hf = build(shape)
    ours = cw.from_hf(hf)
    bridge = bridge_of(hf) if use_tl else None
    counts = Counts.of(hf)
    gen = torch.Generator().manual_seed(0)
    B, P, L, H = shape.batch, shape.n_pos, shape.layers, shape.heads
    clean = torch.randint(1, shape.vocab, (B, P), generator=gen)
    corrupted = clean.clone()
    corrupted[:, P // 2] = torch.randint(1, shape.vocab, (B,), generator=gen)
    correct, wrong = clean[:, -1], torch.full((B,), 17)
    metric = causal.logit_diff(correct.tolist(), wrong.tolist())
    rate = layer_rate(hf, B * P, P, counts)
    rows: list[Row] = []
    for site, by in shape.sweeps:
        if ONLY and site not in ONLY:
            continue
        floor = floor_flops(hf, counts, starts_of(site, by, L, H, P), B, P, 1) / rate
        mine = measure(lambda s=site, b=by: causal.patch(ours, clean, corrupted, metric, site=s, by=b).values,
                       f"ours {site} {by}")  # fmt: skip
        theirs, delta = None, None
        if bridge is not None:
            fn = TL_FUNCTIONS[(site, by)]
            theirs = measure(lambda f=fn: tl_sweep(bridge, f, clean, corrupted, tl_metric(correct, wrong)), f"TL {fn}")
            delta = float(np.abs(np.asarray(mine.result) - theirs.result).max())
        rows.append(Row(shape.name, f"`{site}` by {' × '.join(by)}", mine, floor, theirs, delta, shape.goal))
        gc.collect()
    if shape.induction and (not ONLY or "induction" in ONLY):
        rows += induction_rows(shape, hf, ours, bridge, counts, rate)
    return rows


def induction_rows(shape: Shape, hf: Any, ours: Any, bridge: Any, counts: Counts, rate: float) -> list[Row]:
    """The induction study: repeated random tokens, ``z`` by layer × head, a Python-function metric over 49 positions."""
    gen = torch.Generator().manual_seed(1)
    half = torch.randint(1, shape.vocab, (shape.batch, 25), generator=gen)
    tokens = torch.cat([half, half], dim=1)
    corrupted = torch.cat([torch.randint(1, shape.vocab, (shape.batch, 25), generator=gen), half], dim=1)

    def mean_log_prob(logits: torch.Tensor) -> torch.Tensor:  # the user's function: 49 positions, all ids
        lp = logits[:, :-1].log_softmax(-1)
        return lp.gather(-1, tokens[:, 1:, None])[..., 0].mean()

    L, H = shape.layers, shape.heads
    floor = floor_flops(hf, counts, starts_of("z", ("layer", "head"), L, H, 50), shape.batch, 50, 49) / rate
    plain = measure(lambda: causal.patch(ours, tokens, corrupted, mean_log_prob, site="z", by=("layer", "head")).values,
                    "ours induction, function")  # fmt: skip
    declared = measure(
        lambda: -causal.patch(ours, tokens, corrupted, causal.loss(tokens), site="z", by=("layer", "head")).values,
        "ours induction, declared",
    )
    theirs, delta = None, None
    if bridge is not None:
        theirs = measure(
            lambda: tl_sweep(bridge, "get_act_patch_attn_head_out_all_pos", tokens, corrupted, mean_log_prob),
            "TL induction",
        )
        delta = float(np.abs(np.asarray(plain.result) - theirs.result).max())
    goal = "≥ 3× faster than hand-written TL hooks"
    name = shape.name.split(" ")[0] + " (8 × 50, induction)"
    d2 = None if theirs is None else float(np.abs(np.asarray(declared.result) - theirs.result).max())
    return [
        Row(name, "`z` by layer × head, Python-function metric over 49 positions", plain, floor, theirs, delta, goal),
        Row(name, "the same, metric declared (`causal.loss`)", declared, floor, theirs, d2, goal),
    ]


def forward_rows(use_tl: bool, keys: list[str]) -> list[Row]:
    """A plain forward over 200 × 64 tokens at each of ``keys``' shapes, against TransformerLens's."""
    rows = []
    for key in keys:
        shape = SHAPES[key]
        hf = build(shape)
        ours = cw.from_hf(hf)
        bridge = bridge_of(hf) if use_tl else None
        tokens = torch.randint(1, shape.vocab, (200, 64))
        with torch.no_grad():
            mine = measure(lambda m=ours, t=tokens: m(t), f"ours forward {key}")
            theirs = None if bridge is None else measure(lambda b=bridge, t=tokens: b(t), f"TL forward {key}")
        delta = None if theirs is None else float((mine.result - theirs.result).abs().max())
        counts = Counts.of(hf)
        flops = 200 * shape.layers * sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in range(64))
        flops += 200 * 64 * 2 * shape.d_model * shape.vocab
        floor = flops / layer_rate(hf, 200, 64, counts)
        rows.append(Row(f"{key}, 200 × 64 tokens", "forward pass", mine, floor, theirs, delta, "≥ 1×"))
    return rows


def print_table(rows: list[Row], load: str) -> None:
    print(f"\nmachine: {torch.get_num_threads()} torch threads, float32, CPU; load before the run: {load}; "
          f"median of {REPEATS[0]} calls, CPU seconds of the process (wall medians in the last column)\n")  # fmt: skip
    print(
        "| shape | sweep | circuitwidgets | TransformerLens 4.3 | TL / ours | goal | floor | ours / floor | max abs Δ "
        "| peak extra | wall: ours, TL |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tl = "—" if r.tl is None else f"{r.tl.seconds:.2f} s"
        ratio = "—" if r.tl is None else f"{r.tl.seconds / r.ours.seconds:.2f}×"
        delta = "—" if r.delta is None else f"{r.delta:.1e}"
        wall = f"{r.ours.wall:.2f} s" + ("" if r.tl is None else f", {r.tl.wall:.2f} s")
        print(
            f"| {r.shape} | {r.sweep} | {r.ours.seconds:.2f} s | {tl} | {ratio} | {r.goal} | {r.floor:.3f} s | "
            f"{r.ours.seconds / r.floor:.2f}× | {delta} | {r.ours.peak_bytes / 2**20:,.0f} MB | {wall} |"
        )


def llama_rows() -> list[Row]:
    hf = build_llama1b()
    ours = cw.from_hf(hf)
    counts = Counts.of(hf)
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(100, 128256, (1, 128), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 64] = 5
    metric = causal.logit_diff(clean[:, -1].tolist(), [17])
    rate = layer_rate(hf, 32, 128, counts)
    floor = floor_flops(hf, counts, starts_of("z", ("layer", "head"), 16, 32, 128), 1, 128, 1) / rate
    mine = measure(lambda: causal.patch(ours, clean, corrupted, metric, site="z", by=("layer", "head")).values, "z")
    return [Row("Llama-3.2-1B shape, 1 × 128", "`z` by layer × head", mine, floor, None, None, "—")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="tiny,medium,gpt2", help="comma-separated: tiny, medium, gpt2, llama1b")
    parser.add_argument("--no-tl", action="store_true", help="skip TransformerLens")
    parser.add_argument("--no-forward", action="store_true", help="skip the plain forward pass rows")
    parser.add_argument("--forward", default="tiny,medium", help="shapes of the forward rows (default tiny,medium)")
    parser.add_argument("--sweeps", default="", help="only these sites (and 'induction'), comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's choice)")
    parser.add_argument("--repeats", type=int, default=3, help="calls per measurement; the median counts (default 3)")
    args = parser.parse_args()
    REPEATS[0] = max(1, args.repeats)
    ONLY.update(x for x in args.sweeps.split(",") if x)
    keys = args.shapes.split(",")
    unknown = sorted(set(keys) - {*SHAPES, "llama1b"})
    if unknown:
        parser.error(f"--shapes: expected some of tiny, medium, gpt2, llama1b, got {', '.join(unknown)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    rows: list[Row] = []
    for key in keys:
        rows += llama_rows() if key == "llama1b" else run_shape(key, not args.no_tl)
    if not args.no_forward:
        rows += forward_rows(not args.no_tl, [k for k in args.forward.split(",") if k in SHAPES])
    print_table(rows, load)
    print(f"\nload after the run: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
