"""The induction study's speed against TransformerLens, bounded by counted work: how fast could any exact sweep be here?

Issue 44 asks the medium induction study (``z`` by layer × head on 8 × 50 repeated tokens, a Python-function metric
that reads the log-probs of every position's next token, so the whole vocabulary at 49 positions) to run 3× faster
than TransformerLens's hook loop. This script measures what bounds that ratio on the machine it runs on:

- **the work each side does**, counted as the FLOPs of the matrix products it launches (``torch.utils.flop_counter``),
  after a first call that is not counted (ours measures its cost curve on a shape's first sweep in a process with no calibration on disk). Elementwise work
  (norms, GELU, softmax) is in neither count, and our attention (``scaled_dot_product_attention``, which the counter
  does not see on CPU) is not in ours while TransformerLens's (``bmm``) is in its: both omissions make our count
  smaller, so the bound below is generous to us;
- **each side's time**, the median of several calls after that first one, and so its FLOP rate;
- **this machine's matrix-product rate** at the study's largest product (the MLP's 256 × 1,024) for the row counts a
  sweep of it can form: 400 (one variant, 8 × 50 tokens), 3,200 (eight) and 12,800 (all 32 variants in one pass), the
  best of 20 calls each; and, for scale, at a large square product (2,048³), which a model of d_model 256 cannot form.

From them: ``bound = TL seconds / (our FLOPs / best rate)`` is the most our sweep could gain on TransformerLens's if
every one of our products ran at that rate and nothing else took time. Below 3 at the study's own shapes, the goal
cannot be met by doing our present work faster; it would need less work, and ours is already the floor's
(``bench_causal.py``'s definition: each cell from its own layer on, the last layer at the metric's positions, the
unembedding where the metric reads).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_induction_bound.py --threads 2

Needs TransformerLens (``make test`` installs it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from _causal_common import SHAPES, bridge_of, build, induction_prompts, next_token_log_prob
from torch.utils.flop_counter import FlopCounterMode

import circuitwidgets as cw
from circuitwidgets import causal


def median_seconds(fn: Callable[[], Any], calls: int) -> float:
    """The median wall time of ``calls`` calls of ``fn`` after one untimed call."""
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def counted_flops(fn: Callable[[], Any]) -> float:
    """The FLOPs of the matrix products one call of ``fn`` launches."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return float(counter.get_total_flops())


def product_rate(rows: int, inner: int, cols: int, calls: int = 20) -> float:
    """This machine's best FLOP rate for a ``rows × inner`` by ``inner × cols`` float32 product."""
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    a @ b  # warm-up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2.0 * rows * inner * cols / min(times)


def study(shape_key: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Our sweep and TransformerLens's on the induction study of ``shape_key``'s model (as ``bench_causal.py``)."""
    from bench_causal import tl_sweep

    shape, cpu = SHAPES[shape_key], torch.device("cpu")
    hf = build(shape, cpu)
    ours, bridge = cw.from_hf(hf), bridge_of(hf, cpu)
    tokens, corrupted = induction_prompts(shape, cpu)
    mean_log_prob = next_token_log_prob(tokens)

    def mine() -> Any:
        return causal.patch(ours, tokens, corrupted, mean_log_prob, site="z", by=("layer", "head")).values

    def theirs() -> Any:
        return tl_sweep(bridge, "get_act_patch_attn_head_out_all_pos", tokens, corrupted, mean_log_prob)

    return mine, theirs


def main() -> None:
    """Print the counted work, the rates and the bound."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default torch's choice)")
    parser.add_argument("--calls", type=int, default=7, help="timed calls of each sweep (default 7)")
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: expected a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    mine, theirs = study("medium")
    mine()  # the first sweep of a shape may measure its cost curve: not the work a sweep does
    ours_flops, tl_flops = counted_flops(mine), counted_flops(theirs)
    ours_s, tl_s = median_seconds(mine, args.calls), median_seconds(theirs, args.calls)
    rates = {rows: product_rate(rows, 256, 1024) for rows in (400, 3200, 12800)}
    square_rate = product_rate(2048, 2048, 2048)
    best = max(rates.values())
    print(f"torch threads {torch.get_num_threads()}")
    print(f"ours: {ours_flops / 1e9:.1f} GFLOP in {ours_s:.3f} s ({ours_flops / ours_s / 1e9:.0f} GFLOP/s)")
    print(f"TransformerLens: {tl_flops / 1e9:.1f} GFLOP in {tl_s:.3f} s ({tl_flops / tl_s / 1e9:.0f} GFLOP/s)")
    print(f"TL / ours measured: {tl_s / ours_s:.2f}×; TL's work / ours: {tl_flops / ours_flops:.2f}×")
    shown = ", ".join(f"{rate / 1e9:.0f} ({rows} rows)" for rows, rate in rates.items())
    print(f"best rate of the MLP's 256 × 1024 product, GFLOP/s: {shown}; a 2048³ product: {square_rate / 1e9:.0f}")
    print(f"bound: TL / ours at most {tl_s / (ours_flops / best):.2f}× at the study's best product rate, "
          f"{tl_s / (ours_flops / square_rate):.2f}× at the square product's; "
          f"3× needs {3 * ours_flops / tl_s / 1e9:.0f} GFLOP/s")  # fmt: skip


if __name__ == "__main__":
    main()
