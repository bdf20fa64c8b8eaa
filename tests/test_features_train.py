"""The sparse training step against the dense definition, and the trainer end to end (resumable) on a small model."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _features import mlp_model

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.objective import TrainingDictionary, sparse_step
from circuitwidgets.features.train import DictionarySpec, DictionaryTrainConfig, train_dictionaries


def _dense_loss(
    d: Dictionary, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor | None, k_aux: int, n_aux: int
) -> torch.Tensor:
    """The step's loss written densely from the definitions (encode, decode, aux on the first n_aux rows)."""
    assert d.k is not None
    pre = x @ d.W_enc + d.b_enc
    if d.activation == "topk":
        idx = torch.topk(pre.detach(), d.k, dim=-1).indices
        mask = torch.zeros_like(pre).scatter(-1, idx, 1.0)
    else:
        flat = pre.detach().relu().reshape(-1)
        mask = torch.zeros_like(flat).scatter(-1, torch.topk(flat, d.k * x.shape[0]).indices, 1.0).reshape(pre.shape)
    f = (pre * mask).relu()
    recon = f @ d.W_dec + d.b_dec + (x @ d.W_skip if d.W_skip is not None else 0)
    var = (y - y.mean(0)).pow(2).sum(-1).mean()
    loss = (recon - y).pow(2).sum(-1).mean() / var
    if dead is not None:
        kk = min(k_aux, int(dead.sum()))
        masked = pre.detach()[:n_aux].masked_fill(~dead, float("-inf"))
        amask = torch.zeros_like(masked).scatter(-1, torch.topk(masked, kk, dim=-1).indices, 1.0)
        guess = (pre[:n_aux] * amask) @ d.W_dec
        e = (y[:n_aux] - recon[:n_aux]).detach()
        loss = loss + (guess - e).pow(2).sum(-1).mean() / (e - e.mean(0)).pow(2).sum(-1).mean() / 32
    return loss


@pytest.mark.parametrize("activation", ["topk", "batchtopk"])
@pytest.mark.parametrize("kind", ["sae", "skip-transcoder"])
def test_sparse_step_gradients_equal_dense(kind: str, activation: str) -> None:
    g = torch.Generator().manual_seed(0)
    base = Dictionary.random(
        kind, activation, 6, 20, layer=0, in_site="resid_post" if kind == "sae" else None, k=3, dtype=torch.float64
    )
    with torch.no_grad():
        base.b_enc.normal_(0, 0.3, generator=g)
        if base.W_skip is not None:
            base.W_skip.normal_(0, 0.3, generator=g)
    x = torch.randn(10, 6, generator=g, dtype=torch.float64)
    y = torch.randn(10, 6, generator=g, dtype=torch.float64)
    dead = torch.zeros(20, dtype=torch.bool)
    dead[::3] = True
    td = TrainingDictionary(base)
    result = sparse_step(td, x, y, dead, k_aux=4, aux_coefficient=1 / 32, aux_rows=7)
    result.loss.backward()  # type: ignore[no-untyped-call]
    dense = _dense_loss(base, x, y, dead, 4, 7)
    dense.backward()  # type: ignore[no-untyped-call]
    torch.testing.assert_close(result.loss.detach(), dense.detach())
    assert base.W_enc.grad is not None and td.W_enc_t.grad is not None
    torch.testing.assert_close(td.W_enc_t.grad.t(), base.W_enc.grad)
    for name in ("b_enc", "W_dec", "b_dec") + (("W_skip",) if kind != "sae" else ()):
        torch.testing.assert_close(getattr(td, name).grad, getattr(base, name).grad, msg=name)


def test_trainer_learns_and_resumes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = mlp_model(dtype=torch.float32)
    corpus = np.random.default_rng(0).integers(0, 40, size=4000).astype(np.uint16)
    specs = [DictionarySpec("transcoder", 1, width=24, k=4), DictionarySpec("sae", 0, "resid_post", width=24, k=4)]
    cfg = DictionaryTrainConfig(tokens=64 * 40, batch_size=64, n_ctx=16, buffer_rows=512, windows_per_run=4, lr=3e-3,
                                checkpoint_every=10, log_every=10, threads=1, dead_tokens=200)  # fmt: skip
    log = io.StringIO()
    first = train_dictionaries(
        model,
        specs,
        tmp_path / "a",
        DictionaryTrainConfig(**{**cfg.__dict__, "tokens": 64 * 20}),
        corpus=corpus,
        log=log,
    )
    assert set(first) == {"L1.tc", "L0.resid_post"}
    state = json.loads((tmp_path / "a" / "state.json").read_text())
    assert state["step"] == 20 and state["window"] > 0
    resumed = train_dictionaries(model, specs, tmp_path / "a", cfg, corpus=corpus, log=log)
    assert "from step 20" in log.getvalue()
    records = [json.loads(line) for line in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 40
    fvu = [r["dictionaries"]["L0.resid_post"]["fvu"] for r in records]
    assert fvu[-1] < fvu[0]
    d = resumed["L1.tc"]
    assert d.kind == "transcoder" and d.threshold is not None and d.d_sae == 24


def test_cli_refuses_a_bad_dictionary_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from circuitwidgets.cli import main

    assert main(["train-dictionary", "-o", "unused", "--dict", "transcoder", "--tokens", "10"]) == 2
    assert "--dict: expected KIND[:SITE]@LAYER" in capsys.readouterr().err


def test_a_time_limit_plans_fewer_rows_and_replans_when_the_run_slows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from circuitwidgets.features import train

    ticks = iter(range(10_000))
    # one "second" per reading of the clock for the first 20 readings, then three: the run slows down
    monkeypatch.setattr(train, "_clock", lambda: float(sum(1 if i < 20 else 3 for i in range(next(ticks)))))
    model = mlp_model(dtype=torch.float32)
    corpus = np.random.default_rng(0).integers(0, 40, size=4000).astype(np.uint16)
    cfg = DictionaryTrainConfig(tokens=64 * 10_000, batch_size=64, n_ctx=16, buffer_rows=512, windows_per_run=4,
                                checkpoint_every=10_000, log_every=2, threads=1, time_limit=60.0, calibration_steps=4)  # fmt: skip
    log = io.StringIO()
    train_dictionaries(
        model, [DictionarySpec("sae", 0, "resid_post", width=8, k=2)], tmp_path, cfg, corpus=corpus, log=log
    )
    plans = [int(line.split("planning ")[1].split()[0]) for line in log.getvalue().splitlines() if "planning" in line]
    assert len(plans) >= 2 and plans == sorted(plans, reverse=True) and plans[-1] < plans[0] < 10_000, plans
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == plans[-1] and state["planned_tokens"] == plans[-1] * 64
    assert state["seconds"] <= 60.0 * 1.05
    hardware = json.loads((tmp_path / "hardware.json").read_text())
    assert hardware[0]["from_step"] == 0 and hardware[0]["device"] == "cpu" and hardware[0]["cpus"]


def test_a_time_limit_must_be_positive(tmp_path: Path) -> None:
    model = mlp_model(dtype=torch.float32)
    corpus = np.zeros(400, dtype=np.uint16)
    with pytest.raises(ArgumentError, match="time_limit: expected a positive number of seconds"):
        train_dictionaries(model, [DictionarySpec("sae", 0, "resid_post", width=8, k=2)], tmp_path,
                           DictionaryTrainConfig(time_limit=0.0), corpus=corpus, log=None)  # fmt: skip


def test_a_time_limit_keeps_the_decays_share_of_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 55: a 240 s limit cut the plan to 213 steps only after 200 steps of calibration, so the learning rate
    decayed over 13 of them; the plan is now fitted within 5 % of the time and never leaves the decay behind."""
    from circuitwidgets.features import train

    ticks = iter(range(100_000))
    monkeypatch.setattr(train, "_clock", lambda: float(next(ticks)))  # one "second" per reading of the clock
    model = mlp_model(dtype=torch.float32)
    corpus = np.random.default_rng(0).integers(0, 40, size=4000).astype(np.uint16)
    cfg = DictionaryTrainConfig(tokens=64 * 10_000, batch_size=64, n_ctx=16, buffer_rows=512, windows_per_run=4,
                                checkpoint_every=10_000, log_every=2, threads=1, time_limit=100.0, warmup_steps=2)  # fmt: skip
    assert cfg.calibration_steps == 200  # the default: longer than this whole run
    train_dictionaries(model, [DictionarySpec("sae", 0, "resid_post", width=8, k=2)], tmp_path, cfg, corpus=corpus,
                       log=None)  # fmt: skip
    planned = json.loads((tmp_path / "train_config.json").read_text())["tokens"] // 64
    assert planned < 200
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    decaying = [lr for lr in lrs[1:] if lr < cfg.lr * (1 - 1e-9)]
    share = int(planned * cfg.decay_fraction)
    assert len(decaying) >= share // cfg.log_every - 1, (planned, share, lrs)
    assert all(a >= b for a, b in itertools.pairwise(lrs[1:]))  # after the warm-up, never up again


def test_a_fitted_plan_never_starts_its_decay_in_the_past() -> None:
    from circuitwidgets.features._schedule import fitted, lr_at

    cfg = DictionaryTrainConfig(tokens=64 * 10_000, batch_size=64, time_limit=240.0)
    # at step 200, 200 s in, one step a second: 32 more steps fit, but a 233-step plan's decay began at step 187
    plan = fitted(cfg, 200, 200.0, (0, 0.0))
    decay = int(plan.steps * plan.decay_fraction)
    assert plan.steps - decay == 200 and lr_at(plan, 200) == cfg.lr  # the whole decay is still ahead
    assert lr_at(plan, 201) < cfg.lr and decay == 49
    early = fitted(cfg, 10, 10.0, (0, 0.0))  # fitted early, the time decides
    assert early.steps == 10 + int(240 * 0.97 - 10)
