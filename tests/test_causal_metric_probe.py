"""A plain Python metric's reads inferred before a patch sweep (causal/inferred.py): the narrowed sweep equals the
un-narrowed one on every family in float64, for metrics that read one position, several, all, a few ids and every
id; metrics built to fool the probe fall back to every logit (and say why), or are caught by the sweep's guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from conftest import make_random_model
from families import CASES, VOCAB

from circuitwidgets import causal
from circuitwidgets.causal import inferred, patching
from circuitwidgets.causal.inferred import probe
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf

Metric = Callable[[torch.Tensor], Any]


def _unnarrowed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``patch`` with the inference switched off (the function called on every logit, as written)."""

    def patch(*args: Any, **kwargs: Any) -> Any:
        with monkeypatch.context() as m:
            m.setattr(patching, "infer_reads", lambda model, metric, a, b: metric)
            return causal.patch(*args, **kwargs)

    return patch


def _same(model: CircuitModel, clean: torch.Tensor, corrupted: torch.Tensor, metric: Any, site: str,
          by: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:  # fmt: skip
    """The narrowed sweep against the un-narrowed one (float64, to 1e-10): values and both reference values; the
    narrowed sweep's metric name (what was inferred)."""
    got = causal.patch(model, clean, corrupted, metric, site=site, by=by)
    want = _unnarrowed(monkeypatch)(model, clean, corrupted, metric, site=site, by=by)
    np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-10)
    assert got.clean_value == pytest.approx(want.clean_value, abs=1e-10)
    assert got.corrupted_value == pytest.approx(want.corrupted_value, abs=1e-10)
    return got.metric


def _pair(vocab: int, seed: int, n_pos: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (2, n_pos), generator=gen), torch.randint(3, vocab, (2, n_pos), generator=gen)


def _metrics(clean: torch.Tensor) -> dict[str, tuple[Metric, str]]:
    """Metrics as TransformerLens users write them, and what the probe must infer for each."""

    def last_diff(logits: torch.Tensor) -> torch.Tensor:  # one position, two ids
        return (logits[:, -1, 5] - logits[:, -1, 9]).mean()

    def next_log_prob(logits: torch.Tensor) -> torch.Tensor:  # several positions, every id (a log-softmax)
        return logits.log_softmax(-1)[:, 1:4].gather(-1, clean[:, 2:5, None]).mean()

    def every_position(logits: torch.Tensor) -> torch.Tensor:  # every position, a few ids
        return logits[..., [4, 6, 8]].sum(-1).mean()

    return {
        "one position": (last_diff, "inferred to read position 5 and 2 token ids"),
        "several positions": (next_log_prob, "inferred to read positions 1–3 and every token id"),
        "every position": (every_position, "inferred to read positions 0–5 and 3 token ids"),
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_narrowed_sweep_equals_the_unnarrowed_one_on_every_family(
    case: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = from_hf(case.build(), dtype=torch.float64)
    clean, corrupted = _pair(VOCAB, seed=3)
    for fn, found in _metrics(clean).values():
        assert _same(model, clean, corrupted, fn, "resid_pre", ("layer", "pos"), monkeypatch).endswith(f"({found})")
    fn, found = _metrics(clean)["one position"]
    name = _same(model, clean, corrupted, causal.normalised(fn), "z", ("layer", "head"), monkeypatch)
    assert name == f"normalised last_diff ({found})"


@pytest.fixture(scope="module")
def attn_only() -> tuple[CircuitModel, torch.Tensor, torch.Tensor]:
    """The TransformerLens-style attention-only model (float64) and a prompt pair."""
    return make_random_model(d_vocab=40, seed=2), *_pair(40, seed=5)


@pytest.mark.parametrize("name", ["one position", "several positions", "every position"])
def test_an_attention_only_model_too(
    name: str, attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, clean, corrupted = attn_only
    fn, found = _metrics(clean)[name]
    for site, by in (("resid_pre", ("layer", "pos")), ("pattern", ("layer", "head")), ("z", ("layer", "pos", "head"))):
        assert _same(model, clean, corrupted, fn, site, by, monkeypatch).endswith(f"({found})")


def _threshold(logits: torch.Tensor) -> torch.Tensor:
    """Reads id 7 only when id 3 (which its value does not depend on) is above 0 somewhere."""
    return logits[:, -1, 5].mean() if bool((logits[:, -1, 3] > 0).any()) else logits[:, -1, 7].mean()


def _argmax(logits: torch.Tensor) -> torch.Tensor:
    return (logits[:, -1].argmax(-1) == 5).double().mean()


def _no_grad(logits: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return logits[:, -1, 5].mean()


def _item(logits: torch.Tensor) -> float:
    return float((logits[:, -1, 5] - logits[:, -1, 9]).mean().item())


def _max_over_ids(logits: torch.Tensor) -> torch.Tensor:
    """Its gradient sits on the largest id only; any other id may become the largest."""
    return logits[:, -1].max(-1).values.mean()


def _relu(logits: torch.Tensor) -> torch.Tensor:
    """Zero gradient at id 7 while it is below 50 (on both runs), yet its value moves when id 7 crosses 50."""
    return torch.relu(logits[:, -1, 7] - 50).sum() + logits[:, 0, 1].mean()


def _masked_sum(logits: torch.Tensor) -> torch.Tensor:
    """Reads every logit, weighting all but two by 0 (NaN × 0 is NaN: the guard's fill shows it)."""
    mask = torch.zeros_like(logits)
    mask[:, -1, [5, 9]] = 1.0
    return (logits * mask).sum()


FOOLS: dict[str, tuple[Metric, str]] = {
    "threshold": (_threshold, "its value changes when logits outside its gradient's support are"),
    "argmax": (_argmax, "no gradient reaches the logits"),
    "no_grad": (_no_grad, "no gradient reaches the logits"),
    "item": (_item, "it returns a Python float"),
    "max over ids": (_max_over_ids, "its value changes when logits outside its gradient's support are"),
    "relu": (_relu, "its value changes when logits outside its gradient's support are"),
    "masked sum": (_masked_sum, "its value changes when logits outside its gradient's support are NaN"),
}


@pytest.mark.parametrize("name", list(FOOLS))
def test_metrics_built_to_fool_the_probe_read_every_logit_and_say_why(
    name: str, attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, clean, corrupted = attn_only
    fn, why = FOOLS[name]
    got = _same(model, clean, corrupted, fn, "resid_pre", ("layer", "pos"), monkeypatch)
    assert "(every logit read: " in got and why in got, got
    result = causal.patch(model, clean, corrupted, fn)
    assert why in result.describe()


def test_a_metric_that_raises_raises_as_before(attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor]) -> None:
    model, clean, corrupted = attn_only

    def broken(logits: torch.Tensor) -> torch.Tensor:
        raise KeyError("the user's bug")

    with pytest.raises(KeyError, match="the user's bug"):
        causal.patch(model, clean, corrupted, broken)


def test_a_read_only_a_patched_run_makes_is_caught_by_the_guard(
    attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Id 5's mean decides whether id 7 is read too: below a threshold on both base runs (the probes see id 5 only),
    above it on some patched run, whose metric then meets NaN at id 7; the sweep reruns reading every logit."""
    model, clean, corrupted = attn_only

    def plain(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 5].mean()

    first = _unnarrowed(monkeypatch)(model, clean, corrupted, plain)
    bases = max(first.clean_value, first.corrupted_value)
    assert float(np.nanmax(first.values)) > bases  # (this prompt pair has such a patched run)
    threshold = (bases + float(np.nanmax(first.values))) / 2

    def sneaky(logits: torch.Tensor) -> torch.Tensor:
        v = logits[:, -1, 5].mean()
        return v if bool(v < threshold) else v + logits[:, -1, 7].mean()

    fn, positions_ids = sneaky, probe(sneaky, *_base_logits(model, clean, corrupted))
    assert positions_ids == ([5], [5])  # (the probes alone are fooled)
    got = _same(model, clean, corrupted, fn, "resid_pre", ("layer", "pos"), monkeypatch)
    assert got == "sneaky (every logit read: a patched run read logits outside what its probes found)"


def _base_logits(model: CircuitModel, clean: torch.Tensor, corrupted: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(model(t) for t in (clean, corrupted))


def test_a_metric_that_writes_into_its_logits_is_narrowed_and_equal(
    attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In place, as some users write it: each variant's buffer is fresh once a call has written into it."""
    model, clean, corrupted = attn_only

    def in_place(logits: torch.Tensor) -> torch.Tensor:
        logits[:, -1] -= logits[:, -1, 9:10].clone()
        logits[:, 0] = 0.0
        return logits[:, -1, 5].mean()

    name = _same(model, clean, corrupted, in_place, "resid_pre", ("layer", "pos"), monkeypatch)
    assert name == "in_place (inferred to read position 5 and 2 token ids)"


def test_declared_metrics_are_not_probed(attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor]) -> None:
    model, clean, corrupted = attn_only
    assert causal.patch(model, clean, corrupted, causal.logit_diff(5, 9)).metric == "logit_diff(pos=-1)"


def test_a_probed_metric_runs_vectorised_and_a_data_dependent_one_one_call_at_a_time(
    attn_only: tuple[CircuitModel, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.func.vmap over the variants (what makes a function of many positions cost what a declared metric
    does); a function vmap cannot run (Python control flow on a value) is called once per variant, equal both ways."""
    model, clean, corrupted = attn_only
    fn, _ = _metrics(clean)["several positions"]
    one_by_one = inferred._one_at_a_time
    monkeypatch.setattr(inferred, "_one_at_a_time", lambda *a: pytest.fail("called once per variant"))
    _same(model, clean, corrupted, fn, "resid_pre", ("layer", "pos"), monkeypatch)
    monkeypatch.setattr(inferred, "CHUNK_BYTES", 1)  # one variant a chunk
    _same(model, clean, corrupted, fn, "z", ("layer", "head"), monkeypatch)
    calls: list[int] = []
    monkeypatch.setattr(inferred, "_one_at_a_time", lambda *a: calls.append(1) or one_by_one(*a))

    def branchy(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 5].mean() if bool(logits[:, -1, 5].mean() > -1e9) else logits[:, -1, 5].sum()

    assert _same(model, clean, corrupted, branchy, "resid_pre", ("layer", "pos"), monkeypatch).endswith(
        "(inferred to read position 5 and 1 token id)"
    )
    assert calls
