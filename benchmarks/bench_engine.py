"""Engine benchmark: circuitwidgets against TransformerLens on a GPT-2-small-shaped model.

One random attention-only model (d_vocab 50257, 12 layers × 12 heads, d_model
768, d_head 64, float32) analysed by both libraries (the same weights: when
TransformerLens is installed the model is its native TransformerBridge and we
read its weights; otherwise Gaussian weights). Measured, each once, with wall
time and peak extra resident memory (RSS sampled every millisecond above the
level before the call):

1. eigenvalue copying scores of all 144 full OV circuits;
2. all-pairs composition scores, each of Q, K, V (and the random baseline);
3. top-50 entries of one head's full QK circuit ``[50257, 50257]``, with its
   throughput as a fraction of this machine's float32 matmul rate (measured
   here on 2048 × 2048 products).

Run from the repository root::

    .venv/bin/python benchmarks/bench_engine.py            # with TransformerLens when installed
    .venv/bin/python benchmarks/bench_engine.py --no-tl    # circuitwidgets only

Prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
import torch

from circuitwidgets.circuits import composition_baseline, composition_scores, copying_scores, full_qk
from circuitwidgets.model import CircuitModel, ModelConfig

V, L, H, D, DH, N_CTX = 50257, 12, 12, 768, 64, 1024
TL_ANCHORS = {
    "eigen": "28.5 s",
    "composition": "13–14 s, ~8.5 GB",
    "topk": "16.7 s (top-10, chunked by hand); 9.7 GB or allocation failure materialised",
}


@dataclass
class Measurement:
    """Result, wall seconds and peak extra RSS bytes of one call."""

    result: Any
    seconds: float
    peak_bytes: int


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: RSS figures may then undercount reused memory
        return None


LIBC = _libc()
if LIBC is not None:
    # Serve every allocation above 64 KiB by mmap and return it on free, so RSS
    # rises with each call's own allocations instead of reusing retained heap.
    LIBC.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD (fixing it also disables the dynamic threshold)


class PeakRSS:
    """Sample this process's RSS in a thread; ``peak`` is the maximum above the level at entry."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.process = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss - self.base)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        gc.collect()
        if LIBC is not None:
            LIBC.malloc_trim(0)
        self.base = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss - self.base)


def measure(fn: Callable[[], Any], label: str) -> Measurement:
    """Run ``fn`` once, timing it and sampling its peak extra memory (progress on stderr)."""
    with PeakRSS() as rss:
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.2f} s, peak extra {rss.peak / 2**20:.0f} MB", file=sys.stderr, flush=True)
    return Measurement(result, seconds, rss.peak)


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
    """Best float32 ``size × size`` matmul rate of this machine (GFLOP/s)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def random_model(seed: int = 0) -> CircuitModel:
    """Gaussian GPT-2-small-shaped attention-only model (float32, shortformer positions)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    weights = {
        "W_E": r(V, D, std=0.02), "W_pos": r(N_CTX, D, std=0.01),
        "W_Q": r(L, H, D, DH, std=0.02), "W_K": r(L, H, D, DH, std=0.02),
        "W_V": r(L, H, D, DH, std=0.02), "W_O": r(L, H, DH, D, std=0.02), "W_U": r(D, V, std=0.02),
    }
    return CircuitModel(ModelConfig(L, H, D, DH, V, N_CTX), weights, name="gpt2-small-shaped")


def transformer_lens_pair() -> tuple[Any, CircuitModel] | None:
    """A TransformerLens native bridge of the same shape and a CircuitModel sharing its weights."""
    try:
        from transformer_lens.config import TransformerBridgeConfig
        from transformer_lens.model_bridge.sources.native import boot
    except ImportError:
        return None
    cfg = TransformerBridgeConfig(
        d_model=D, d_head=DH, n_heads=H, n_layers=L, n_ctx=N_CTX, d_vocab=V,
        attn_only=True, normalization_type=None, positional_embedding_type="standard", seed=0,
    )
    bridge = boot(cfg, dtype=torch.float32)
    names = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")
    with torch.no_grad():
        weights = {name: getattr(bridge, name).detach().contiguous() for name in names}
    model = CircuitModel(ModelConfig(L, H, D, DH, V, N_CTX, positional_embedding_type="standard"), weights, name="tl-native")
    return bridge, model


# ----------------------------------------------------------------- TransformerLens side
def tl_eigen_scores(bridge: Any) -> np.ndarray:
    """Σλ/Σ|λ| from ``FactoredMatrix.eigenvalues`` of ``W_E @ OV @ W_U`` (all heads at once)."""
    with torch.no_grad():
        eigs = (bridge.W_E @ bridge.OV @ bridge.W_U).eigenvalues
        return (eigs.sum(-1).real / eigs.abs().sum(-1)).numpy()


def tl_composition(bridge: Any, kind: str) -> np.ndarray:
    with torch.no_grad():
        return bridge.all_composition_scores(kind).scores.numpy()


def tl_topk(bridge: Any, k: int, rows_per_chunk: int = 1024) -> torch.Tensor:
    """Top-k of one head's full QK circuit, chunked by hand over FactoredMatrix factors."""
    with torch.no_grad():
        full = bridge.W_E @ bridge.QK[0, 0] @ bridge.W_E.T
        A, B = full.A, full.B
        best = torch.empty(0)
        for start in range(0, A.shape[0], rows_per_chunk):
            block = (A[start : start + rows_per_chunk] @ B).flatten()
            best = torch.topk(torch.cat([best, torch.topk(block, k).values]), k).values
        return best


# ---------------------------------------------------------------------------- report
def fmt_time(m: Measurement | None) -> str:
    return "—" if m is None else f"{m.seconds:.2f} s"


def fmt_mem(m: Measurement | None) -> str:
    return "—" if m is None else f"{m.peak_bytes / 2**20:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-tl", action="store_true", help="skip TransformerLens even when installed")
    parser.add_argument("--k", type=int, default=50, help="top-k entries of the full QK circuit (default 50)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    rate = matmul_gflops()
    pair = None if args.no_tl else transformer_lens_pair()
    bridge, model = pair if pair is not None else (None, random_model())
    print(f"machine: {torch.get_num_threads()} torch threads, float32 matmul {rate:.1f} GFLOP/s; "
          f"model {model!r}; TransformerLens: {'yes' if bridge is not None else 'no'}\n")

    rows: list[tuple[str, Measurement, Measurement | None, str, str]] = []
    ours = measure(lambda: copying_scores(model, "ov", "eigen"), "circuitwidgets eigen")
    theirs = measure(lambda: tl_eigen_scores(bridge), "TransformerLens eigen") if bridge is not None else None
    note = "" if theirs is None else f"max |Δ| {np.nanmax(np.abs(ours.result - theirs.result)):.1e}"
    rows.append(("eigenvalue copying scores, 144 heads (OV)", ours, theirs, TL_ANCHORS["eigen"], note))

    for kind in ("Q", "K", "V"):
        ours = measure(lambda kind=kind: composition_scores(model, kind), f"circuitwidgets composition {kind}")  # type: ignore[misc]
        theirs = (
            measure(lambda kind=kind: tl_composition(bridge, kind), f"TransformerLens composition {kind}")  # type: ignore[misc]
            if bridge is not None
            else None
        )
        note = ""
        if theirs is not None:
            mask = ~np.isnan(ours.result)
            note = f"max |Δ| {np.abs(ours.result[mask] - theirs.result[mask]).max():.1e}"
        rows.append((f"composition scores, all pairs ({kind})", ours, theirs, TL_ANCHORS["composition"], note))
    base = measure(lambda: composition_baseline(D, DH), "circuitwidgets composition baseline")
    rows.append(("composition baseline (100 Monte-Carlo samples, once)", base, None, "", f"value {base.result:.4f}"))

    circuit = full_qk(model, 0, 0)
    ours = measure(lambda: circuit.topk(args.k, progress_bar=False), f"circuitwidgets top-{args.k}")
    theirs = measure(lambda: tl_topk(bridge, args.k), f"TransformerLens top-{args.k}") if bridge is not None else None
    throughput = 2 * V * V * DH / ours.seconds / 1e9
    note = f"{throughput:.1f} GFLOP/s = {100 * throughput / rate:.0f} % of matmul rate"
    if theirs is not None:
        agree = torch.allclose(ours.result.values, theirs.result, rtol=1e-4, atol=1e-6)
        note += f"; values agree: {agree}"
    rows.append((f"top-{args.k} entries of one full QK circuit", ours, theirs, TL_ANCHORS["topk"], note))

    print("| task | circuitwidgets | peak extra | TransformerLens | TL peak extra | TL anchor (2 cores) | notes |")
    print("|---|---|---|---|---|---|---|")
    for task, mine, tl, anchor, extra in rows:
        print(f"| {task} | {fmt_time(mine)} | {fmt_mem(mine)} | {fmt_time(tl)} | {fmt_mem(tl)} | {anchor} | {extra} |")


if __name__ == "__main__":
    main()
