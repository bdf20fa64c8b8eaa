"""``circuitwidgets train --mlp N --norm layernorm``: MLPs and LayerNorm, exported exactly, logged, resumable.

Small runs on a slice of the standard library (as ``tests/test_training.py``);
the shipped ``gelu-2l`` is trained by the same code at full size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from circuitwidgets.cli import main
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.training.corpus import load_stdlib_corpus
from circuitwidgets.training.tokenizer import encode_corpus, train_bpe
from circuitwidgets.training.train import TrainConfig, export_model, exported_bytes
from circuitwidgets.training.transformer import ToyConfig, ToyTransformer

SMALL = ["--layers", "2", "--heads", "2", "--d-model", "32", "--d-head", "8", "--n-ctx", "32", "--batch-size", "8"]
MLP = ["--mlp", "64", "--act", "gelu", "--norm", "layernorm"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = load_stdlib_corpus()
    root = tmp_path_factory.mktemp("cache")
    tokenizer = train_bpe(corpus.train[:30], vocab_size=256)
    tokenizer.save(str(root / "tokenizer.json"))
    np.save(root / "train_tokens.npy", encode_corpus(tokenizer, corpus.train[:30]))
    np.save(root / "val_tokens.npy", encode_corpus(tokenizer, corpus.val[:4]))
    return root


def _train(cache: Path, out: Path, steps: int) -> Path:
    argv = ["train", *SMALL, *MLP, "--steps", str(steps), "--eval-every", "20", "--cache", str(cache), "-o", str(out)]
    assert main(argv) == 0
    return out


def _module(seed: int = 0) -> ToyTransformer:
    cfg = ToyConfig(2, 2, 32, 8, 300, 32, d_mlp=64, act_fn="gelu", norm="layernorm")
    module = ToyTransformer(cfg, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():  # trained-looking norms and biases, so folding is exercised
        gen = torch.Generator().manual_seed(seed + 1)
        for name in ("ln1_w", "ln2_w", "lnf_w"):
            getattr(module, name).copy_(1 + 0.3 * torch.randn(getattr(module, name).shape, generator=gen))
        for name in ("ln1_b", "ln2_b", "lnf_b", "b_O", "b_in", "b_out"):
            getattr(module, name).copy_(0.2 * torch.randn(getattr(module, name).shape, generator=gen))
    return module


def test_exported_model_with_mlps_and_layernorm_computes_what_was_trained(tmp_path: Path) -> None:
    module = _module().double()  # folded in float64, so the comparison is exact to rounding
    tokenizer = Tokenizer.from_str(train_bpe(["def f(x):\n    return x\n"] * 5, vocab_size=300).to_str())
    export_model(module, tokenizer, tmp_path / "m", meta={}, dtype=torch.float64)
    model = CircuitModel.load(tmp_path / "m", dtype=torch.float64)
    assert model.cfg.has_mlp and model.cfg.normalization == "ln_pre" and model.cfg.d_mlp == 64
    tokens = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = module(tokens)
    assert isinstance(expected, torch.Tensor)
    torch.testing.assert_close(model(tokens), expected, atol=1e-9, rtol=1e-9)


def test_layernorm_model_logs_each_mlps_share_of_direct_logit_attribution(cache: Path, tmp_path: Path) -> None:
    run = _train(cache, tmp_path / "run", 40)
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [20, 40]
    dla = log[-1]["direct_logit_attribution"]
    shares = [dla["share"]["embed"], *dla["share"]["attn"], *dla["share"]["mlp"]]
    assert len(dla["share"]["mlp"]) == 2 and all(s >= 0 for s in shares)
    assert abs(sum(shares) - 1) < 2e-3  # rounded to 4 digits each
    model = CircuitModel.load(run / "model")
    assert model.cfg.has_mlp and model.cfg.act_fn == "gelu"


def test_resumed_mlp_run_equals_an_unbroken_one(cache: Path, tmp_path: Path) -> None:
    whole = _train(cache, tmp_path / "whole", 40)
    _train(cache, tmp_path / "split", 20)
    split = _train(cache, tmp_path / "split", 40)
    a = CircuitModel.load(whole / "model").weights()
    b = CircuitModel.load(split / "model").weights()
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=0, rtol=0, msg=name)


def test_size_budget_counts_the_mlps() -> None:
    base = TrainConfig(n_layers=2, n_heads=8, d_model=256, d_head=32)
    with_mlp = TrainConfig(n_layers=2, n_heads=8, d_model=256, d_head=32, d_mlp=1024, norm="layernorm")
    assert exported_bytes(with_mlp) - exported_bytes(base) >= 2 * 2 * (2 * 256 * 1024)
    shipped = Path(__file__).resolve().parent.parent / "circuitwidgets" / "pretrained" / "gelu-2l" / "model.safetensors"
    assert shipped.stat().st_size <= exported_bytes(with_mlp) + 4096  # the header's few hundred bytes


def test_unknown_norm_is_refused_before_training() -> None:
    with pytest.raises(ArgumentError, match="norm"):
        ToyConfig(1, 1, 8, 8, 10, 8, norm="rmsnorm")
