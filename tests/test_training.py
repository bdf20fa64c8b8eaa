"""``circuitwidgets train`` at small scale: it learns, it is deterministic, resuming changes nothing.

The shipped models take tens of minutes of CPU and are not retrained in CI;
these runs use a slice of the same corpus (a few standard-library files), a
256-token BPE and a model with a few thousand parameters, for a few hundred steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.cli import main
from circuitwidgets.training.corpus import load_stdlib_corpus
from circuitwidgets.training.tokenizer import encode_corpus, train_bpe

TINY = [
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-model",
    "32",
    "--d-head",
    "8",
    "--n-ctx",
    "32",
    "--batch-size",
    "8",
    "--lr",
    "1e-2",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tokenizer and token arrays from 40 standard-library files, in the layout ``train`` caches."""
    corpus = load_stdlib_corpus()
    root = tmp_path_factory.mktemp("cache")
    tokenizer = train_bpe(corpus.train[:40], vocab_size=256)
    tokenizer.save(str(root / "tokenizer.json"))
    np.save(root / "train_tokens.npy", encode_corpus(tokenizer, corpus.train[:40]))
    np.save(root / "val_tokens.npy", encode_corpus(tokenizer, corpus.val[:5]))
    return root


def _train(cache: Path, out: Path, steps: int, *extra: str) -> Path:
    argv = ["train", *TINY, "--steps", str(steps), "--eval-every", "100", "--cache", str(cache), "-o", str(out), *extra]
    assert main(argv) == 0
    return out


def _log(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_a_few_hundred_steps_learn_the_corpus(cache: Path, tmp_path: Path) -> None:
    run = _train(cache, tmp_path / "run", 300)
    log = _log(run)
    assert [r["step"] for r in log] == [100, 200, 300]
    vocab = load_file(str(run / "checkpoint" / "model.safetensors"))["W_E"].shape[0]
    first, last = float(log[0]["val_loss"]), float(log[-1]["val_loss"])  # type: ignore[arg-type]
    assert last < first - 0.2, log  # measured: 2.82 at step 100, 2.48 at step 300
    assert last < math.log(vocab) - 1.5, f"held-out loss {last} is near uniform ({math.log(vocab):.2f})"
    # Each evaluation records the head detectors and the OV copying score of every head.
    assert np.shape(log[-1]["ov_copying"]) == (1, 2) and np.shape(log[-1]["previous_token"]) == (1, 2)

    model = cw.CircuitModel.load(run / "model")
    assert model.cfg.n_layers == 1 and model.cfg.n_heads == 2 and model.cfg.d_vocab == vocab
    recorded = np.asarray(log[-1]["ov_copying"])
    measured = circuits.copying_scores(model, circuit="ov", method="eigen")
    # the export is float16; the log was computed on the float32 weights
    np.testing.assert_allclose(measured, recorded, atol=5e-3)


def test_training_is_deterministic_and_resuming_gives_the_same_weights(cache: Path, tmp_path: Path) -> None:
    straight = _train(cache, tmp_path / "straight", 40)
    again = _train(cache, tmp_path / "again", 40)
    resumed = _train(cache, tmp_path / "resumed", 25)
    _train(cache, resumed, 40)  # picks up the checkpoint written at step 25
    weights = [load_file(str(run / "checkpoint" / "model.safetensors")) for run in (straight, again, resumed)]
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), f"{name} differs between two identical runs"
        assert torch.equal(tensor, weights[2][name]), f"{name} differs after resuming at step 25"
    assert json.loads((resumed / "checkpoint" / "state.json").read_text()) == {"step": 40}


def test_an_annealed_run_resumed_midway_matches_an_unbroken_one_and_logs_each_step_once(
    cache: Path, tmp_path: Path
) -> None:
    straight = _train(cache, tmp_path / "straight", 40, "--decay-steps", "20", "--eval-every", "10")
    resumed = _train(cache, tmp_path / "resumed", 30, "--eval-every", "10")  # constant lr up to its checkpoint
    (resumed / "log.jsonl").write_text((resumed / "log.jsonl").read_text() + json.dumps({"step": 35}) + "\n")
    _train(cache, resumed, 40, "--decay-steps", "20", "--eval-every", "10")
    # steps 20-29 ran at the constant rate in the first run but were annealed in the straight one
    assert [r["step"] for r in _log(resumed)] == [10, 20, 30, 40]  # the stray record after the checkpoint is dropped
    a, b = (load_file(str(run / "checkpoint" / "model.safetensors"))["W_E"] for run in (straight, resumed))
    assert not torch.equal(a, b)
    again = _train(cache, tmp_path / "again", 20, "--eval-every", "10")
    _train(cache, again, 40, "--decay-steps", "20", "--eval-every", "10")  # resumed where the decay starts
    assert torch.equal(a, load_file(str(again / "checkpoint" / "model.safetensors"))["W_E"])


def test_the_learning_rate_warms_up_holds_then_anneals_to_zero() -> None:
    from circuitwidgets.training.train import TrainConfig, lr_factor

    cfg = TrainConfig(steps=1000, warmup_steps=100, decay_steps=400)
    assert lr_factor(cfg, 0) == pytest.approx(0.01) and lr_factor(cfg, 99) == 1.0
    assert lr_factor(cfg, 599) == 1.0 and 0.99 < lr_factor(cfg, 600) < 1.0
    assert lr_factor(cfg, 799) == pytest.approx(0.5) and lr_factor(cfg, 999) == pytest.approx(0.0)
    assert lr_factor(TrainConfig(steps=1000), 999) == 1.0  # no decay unless asked


def test_a_two_layer_run_logs_the_history_of_composition_and_in_context_learning(cache: Path, tmp_path: Path) -> None:
    argv = [a if a != "1" else "2" for a in TINY[:2]] + TINY[2:]
    run = tmp_path / "run2"
    assert main(["train", *argv, "--steps", "60", "--eval-every", "30", "--cache", str(cache), "-o", str(run)]) == 0
    log = _log(run)
    assert [r["step"] for r in log] == [30, 60]
    assert all(isinstance(r["icl_score"], float) and math.isfinite(r["icl_score"]) for r in log)
    recorded = np.asarray(log[-1]["k_composition"])  # [n_layers - 1, heads (earlier), heads (later)]
    assert recorded.shape == (1, 2, 2)
    model = cw.CircuitModel.load(run / "model")
    measured = circuits.composition_scores(model, "K", baseline=True)[0, :, 1, :]
    np.testing.assert_allclose(measured, recorded[0], atol=5e-3)  # float16 export against float32 training
