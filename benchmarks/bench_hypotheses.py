"""Testing hypotheses, timed: causal tracing against the same loop with TransformerLens hooks, and causal scrubbing.

1. Causal tracing of a 32-token prompt on a model of gelu-2l's shape (2 layers, 8 heads, d_model 512, d_mlp 2048,
   vocabulary 48,262; random GPT-2-style Hugging Face weights, float32, read by ``cw.from_hf`` and bridged by
   TransformerLens's ``TransformerBridge`` from the same object), 10 noise samples, every layer × position for
   three sites (the stream after each layer, MLP and attention outputs): ``cw.causal_trace`` against the ROME loop
   written with TransformerLens hooks (one hooked run of the 10 samples per cell). Both use the same noise, so their
   maps are compared too.
2. Scrubbing a 3-path hypothesis (the previous-token head into the three induction heads' keys) on 1,000 repeated
   random sequences on the shipped ``attn-only-2l-12h``: time, one-layer passes and recomputed heads.

Run: ``PYTHONPATH=. python benchmarks/bench_hypotheses.py`` (prints a table and ``--json`` a JSON line).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import circuitwidgets as cw
from circuitwidgets.hypotheses.trace import embedding_noise

SITES = {"resid": "hook_resid_post", "mlp_out": "hook_mlp_out", "attn_out": "hook_attn_out"}


def gelu_shaped() -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=48262, n_positions=64, n_embd=512, n_layer=2, n_head=8, n_inner=2048, bos_token_id=0,
        eos_token_id=0, activation_function="gelu_new",
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    return model.eval()


def tl_trace(
    bridge: Any, tokens: torch.Tensor, corrupt: list[int], offsets: torch.Tensor, answer: int, hook: str
) -> np.ndarray:
    """The ROME loop with TransformerLens hooks: per layer and position, one run of the noised samples restoring one state."""
    samples = offsets.shape[0]
    _, clean = bridge.run_with_cache(tokens)
    n_layers, n_pos = bridge.cfg.n_layers, tokens.shape[1]
    out = np.zeros((n_layers, n_pos))

    def noise(value: torch.Tensor, hook: Any) -> torch.Tensor:
        value = value.clone()
        value[:, corrupt] += offsets.to(value.dtype)
        return value

    for layer in range(n_layers):
        name = f"blocks.{layer}.{hook}"
        for pos in range(n_pos):

            def restore(value: torch.Tensor, hook: Any, pos: int = pos, name: str = name) -> torch.Tensor:
                value[:, pos] = clean[name][0, pos]
                return value

            with torch.no_grad():
                logits = bridge.run_with_hooks(
                    tokens.repeat(samples, 1), fwd_hooks=[("hook_embed", noise), (name, restore)]
                )
            out[layer, pos] = float(torch.softmax(logits[:, -1].double(), -1)[:, answer].mean())
    return out


def bench_trace() -> list[dict[str, Any]]:
    sys.path.insert(0, os.path.dirname(__file__))
    from _causal_common import bridge_of

    hf = gelu_shaped()
    ours_model = cw.from_hf(hf)
    bridge = bridge_of(hf, torch.device("cpu"))
    tokens = torch.randint(1, 48262, (1, 32), generator=torch.Generator().manual_seed(0))
    corrupt, answer, samples = [3, 4, 5], int(tokens[0, -1]), 10
    rows = []
    for site, hook in SITES.items():
        cw.causal_trace(ours_model, tokens[:, :8], corrupt=corrupt, answer=answer, site=site, samples=2)  # warm-up
        started = time.perf_counter()
        ours = cw.causal_trace(ours_model, tokens, corrupt=corrupt, answer=answer, site=site, samples=samples, seed=0)
        t_ours = time.perf_counter() - started
        std = float(ours_model.W_E.double().std()) * 3.0
        offsets = embedding_noise(samples, len(corrupt), 512, std, 0).float()
        started = time.perf_counter()
        theirs = tl_trace(bridge, tokens, corrupt, offsets, answer, hook)
        t_tl = time.perf_counter() - started
        rows.append({
            "site": site, "ours_s": t_ours, "tl_s": t_tl, "speedup": t_tl / t_ours,
            "max_abs_diff": float(np.abs(ours.values - theirs).max()),
        })  # fmt: skip
        print(f"trace {site:8s}: ours {t_ours:6.2f} s, TransformerLens hooks {t_tl:6.2f} s, "
              f"{t_tl / t_ours:5.1f}× faster, max |Δ| {rows[-1]['max_abs_diff']:.1e}", flush=True)  # fmt: skip
    return rows


def bench_scrub(n: int = 1000, half: int = 10, resamples: int = 2) -> dict[str, Any]:
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    first = torch.randint(1, model.cfg.d_vocab, (n, half), generator=gen)
    bos = torch.full((n, 1), model.tokenizer.bos_token_id or 0)
    tokens = torch.cat([bos, first, first], dim=1)
    prev = int(np.argmax(cw.circuits.head_scores(model, kind="previous_token")[0]))
    paths = [(f"L0H{prev} -> L1H{h}.k -> logits", None) for h in (5, 7, 9)]
    hypothesis = cw.Hypothesis(paths, name="previous-token head → induction keys")
    started = time.perf_counter()
    result = cw.scrub(model, hypothesis, tokens, resamples=resamples)
    elapsed = time.perf_counter() - started
    distinct = len(paths) + 1
    whole_runs = result.runs / model.cfg.n_layers * n + n  # one-layer passes as whole forward passes, + the clean run
    row = {
        "examples": n, "resamples": resamples, "seconds": elapsed, "seconds_per_resample": elapsed / resamples,
        "one_layer_passes": result.runs, "sequences": result.sequences, "recomputed": result.recomputed,
        "bound_sequences": distinct * n * resamples + n, "recovered": result.recovered,
        "whole_run_sequences": whole_runs,
    }  # fmt: skip
    print(f"scrub 3 paths, {n} examples × {resamples} resamples: {elapsed:.2f} s "
          f"({elapsed / resamples:.2f} s a resample), {result.runs} one-layer passes = {result.sequences} sequences "
          f"through one layer = {whole_runs:.0f} through the whole model (bound: {distinct} distinct inputs × {n} examples × {resamples} + one clean run = {row['bound_sequences']}); "
          f"recovered {100 * result.recovered:.1f} %", flush=True)  # fmt: skip
    return row


def main() -> None:
    torch.set_grad_enabled(False)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, torch threads {torch.get_num_threads()}")
    out = {"trace": [] if "--scrub-only" in sys.argv else bench_trace(), "scrub": bench_scrub(), "load": load}
    if "--json" in sys.argv:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
