"""The first-call benchmark's pieces (``benchmarks/bench_causal_first_call.py``): its Python metric and its declared
metric give the same numbers (so its rows compare like with like), and its table prints each ratio from its row."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import causal

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_causal_first_call

        return bench_causal_first_call
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_python_and_declared_metrics_agree_at_the_medium_shape(bench: ModuleType) -> None:
    model = cw.from_hf(bench.build(bench.SHAPES["medium"], torch.device("cpu")))
    clean, corrupted = bench.prompts("medium")
    python = bench.metric_of("medium", "python", model, clean, corrupted)
    declared = bench.metric_of("medium", "declared", model, clean, corrupted)
    with torch.no_grad():
        logits = model(clean)
    assert float(python(logits)) == pytest.approx(float(declared(logits)), rel=1e-5)
    first = causal.patch(model, clean[:2, :12], corrupted[:2, :12], lambda lg: lg[:, -1, 5].mean())
    assert "inferred to read position 11 and 1 token id" in first.metric


def test_the_table_prints_each_rows_ratios(bench: ModuleType) -> None:
    row = {"shape": "s", "sweep": "w", "side": "python", "metric": "m", "tl": 16.0, "first_cold": 3.0,
           "first": 2.0, "warm": 1.6, "delta": 2e-6}  # fmt: skip
    line = bench.table([row]).splitlines()[-1]
    assert line == "| s | w | python: m | 16.00 s | 3.00 s | 2.00 s | 1.60 s | 8.00× | 10.00× | 1.25× | 2.0e-06 |"
