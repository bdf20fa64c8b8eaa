"""Training throughput of SoLU + LN against GELU in the same transformer (tokens per second).

The shape of the shipped pair (one layer, 4 heads × 32, d_model 128, d_mlp 512, LayerNorm, context 128,
vocabulary 2048, batch 16): forward, loss, backward and an AdamW step on random tokens, the two activations
interleaved in one process (GELU, SoLU, GELU, ...), ``--repeats`` rounds of ``--steps`` steps each; the median
per activation. One torch thread unless ``--threads``. Prints JSON.

    nice python benchmarks/bench_solu.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from circuitwidgets.training.transformer import ToyConfig, ToyTransformer


def _steps(model: ToyTransformer, opt: torch.optim.Optimizer, tokens: torch.Tensor, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        logits = model(tokens)
        assert isinstance(logits, torch.Tensor)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n-ctx", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokens = torch.randint(0, 2048, (args.batch, args.n_ctx), generator=torch.Generator().manual_seed(0))
    runs: dict[str, list[float]] = {"gelu": [], "solu_ln": []}
    models = {}
    for act in runs:
        cfg = ToyConfig(1, 4, 128, 32, 2048, args.n_ctx, d_mlp=512, act_fn=act, norm="layernorm")
        model = ToyTransformer(cfg, generator=torch.Generator().manual_seed(0))
        models[act] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        _steps(*models[act], tokens, 2)  # warm-up
    for _ in range(args.repeats):
        for act in runs:
            runs[act].append(_steps(*models[act], tokens, args.steps))
    n_tokens = args.steps * args.batch * args.n_ctx
    result = {
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "tokens_per_second": {act: n_tokens / statistics.median(s) for act, s in runs.items()},
    }
    tps = result["tokens_per_second"]
    assert isinstance(tps, dict)
    result["solu_over_gelu"] = tps["solu_ln"] / tps["gelu"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
