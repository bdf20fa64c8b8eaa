"""Dashboards for every feature of one dictionary over at least 1M tokens of held-out code: time and peak memory.

The dictionary: the shipped ``gelu-2l`` transcoder of layer 1 when
``circuitwidgets.features.load_pretrained("gelu-2l")`` has one, else a randomly
initialised transcoder of the shipped width (4,096 features, TopK k = 32) on
layer 1, said so in the output (the pass costs the same: the encoder runs on
every token whatever its weights). The corpus: held-out code the model never
saw, the standard library's held-out files and then the ``.py`` files of the
installed packages (``site-packages``, never in the training corpus), in rows of
128 tokens each after a BOS, until ``--tokens``.

Timed: ``features.max_activating`` (one streaming pass: top 16 contexts, a
sample of 8, the histogram, for every feature), the dashboard data (logit
effects, nearby features, quantisation) and writing the offline page; the
page's size. Peak memory: the process's peak resident set (``ru_maxrss``),
including the model, the corpus's token ids and Python itself.

    nice -n 10 .venv/bin/python benchmarks/bench_dashboards.py --tokens 1048576 --threads 2
"""

from __future__ import annotations

import argparse
import os
import resource
import site
import sys
import time
from pathlib import Path

import torch

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.export import save_html
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.training.corpus import load_stdlib_corpus


def held_out_texts() -> list[str]:
    """The standard library's held-out files, then the installed packages' Python files (sorted by path)."""
    texts = list(load_stdlib_corpus().val)
    for root in site.getsitepackages():
        for path in sorted(Path(root).rglob("*.py")):
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, OSError):
                continue
            if len(texts) > 40_000:
                return texts
    return texts


def corpus(model: cw.CircuitModel, n_tokens: int, n_ctx: int = 128) -> torch.Tensor:
    """``[rows, n_ctx]`` held-out tokens, each row after a BOS, at least ``n_tokens`` in all."""
    rows = -(-n_tokens // n_ctx)
    ids: list[int] = []
    for text in held_out_texts():
        ids.extend(model.tokenizer.encode(text))
        if len(ids) >= rows * (n_ctx - 1):
            break
    if len(ids) < rows * (n_ctx - 1):
        sys.exit(f"only {len(ids):,} held-out tokens found, fewer than {rows * (n_ctx - 1):,}")
    body = torch.tensor(ids[: rows * (n_ctx - 1)]).view(rows, n_ctx - 1)
    return torch.cat([torch.zeros(rows, 1, dtype=torch.long), body], dim=1)


def dictionary(model: cw.CircuitModel) -> tuple[Dictionary, str]:
    try:
        shipped = features.load_pretrained("gelu-2l")
        d = next(v for v in shipped.values() if v.kind == "transcoder" and v.layer == 1)
        return d, f"shipped {d.name} ({d.d_sae:,} features)"
    except Exception as exc:  # (any reason the shipped one is missing is reported)
        d = Dictionary.random("transcoder", "topk", model.cfg.d_model, 4096, layer=1, k=32, seed=0)
        return d, f"randomly initialised L1 transcoder, 4,096 features, TopK 32 (no shipped dictionary: {exc!s:.80})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2**20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("every-feature.html"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = cw.load_pretrained("gelu-2l")
    d, what = dictionary(model)
    tokens = corpus(model, args.tokens)
    print(f"{what}; {tokens.numel():,} held-out tokens in {len(tokens):,} rows; {args.threads} threads")
    start = time.perf_counter()
    ex = features.max_activating(model, tokens, features.dictionary_features(model, d), k=16, samples=8, batch_size=32)
    passed = time.perf_counter()
    dash = cw.FeatureDashboard(ex, model, d)
    built = time.perf_counter()
    save_html([dash], args.out)
    saved = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # (KiB on Linux)
    print("| step | seconds |\n|---|---|")
    print(f"| streaming pass ({tokens.numel() / (passed - start):,.0f} tokens/s) | {passed - start:.1f} |")
    print(f"| dashboard data (logit effects, neighbours, quantising) | {built - passed:.1f} |")
    print(f"| offline page ({args.out.stat().st_size / 2**20:.1f} MiB) | {saved - built:.1f} |")
    print(f"| **total** | **{saved - start:.1f}** |")
    print(f"peak resident memory {peak:,.0f} MiB; dead features (never active): {(ex.n_active == 0).sum():,}")
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
