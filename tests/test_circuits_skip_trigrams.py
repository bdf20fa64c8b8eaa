"""Skip-trigrams are read off the dense QK and OV circuits exactly."""

from __future__ import annotations

import pytest
import torch
from conftest import make_random_model

from circuitwidgets.circuits import skip_trigrams, source_profile
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel


def dense_circuits(model: CircuitModel, l: int, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    qk = model.W_E @ model.W_Q[l, h] @ model.W_K[l, h].T @ model.W_E.T / model.cfg.scale
    ov = model.W_E @ model.W_V[l, h] @ model.W_O[l, h] @ model.W_U
    return qk, ov


def test_global_skip_trigrams_are_the_largest_ov_entries_with_their_best_destination() -> None:
    model = make_random_model(n_layers=1, n_heads=2, d_vocab=60, seed=2)
    qk, ov = dense_circuits(model, 0, 1)
    records = skip_trigrams(model, 0, 1, k=7, memory_budget=256)
    expected = torch.topk(ov.flatten(), 7).values
    assert [r.ov for r in records] == pytest.approx(expected.tolist())
    for r in records:
        assert ov[r.source, r.out] == pytest.approx(r.ov)
        assert r.destination == int(qk[:, r.source].argmax())
        assert r.qk == pytest.approx(float(qk[r.destination, r.source]))
        assert r.copying == (r.out == r.source)
        assert (r.source_str, r.destination_str, r.out_str) == (f"<{r.source}>", f"<{r.destination}>", f"<{r.out}>")


def test_global_skip_trigrams_by_qk_are_the_largest_attention_entries_with_their_best_out() -> None:
    model = make_random_model(n_layers=1, n_heads=1, d_vocab=40, seed=3)
    qk, ov = dense_circuits(model, 0, 0)
    records = skip_trigrams(model, 0, 0, k=5, by="qk")
    assert [r.qk for r in records] == pytest.approx(torch.topk(qk.flatten(), 5).values.tolist())
    for r in records:
        assert qk[r.destination, r.source] == pytest.approx(r.qk)
        assert r.out == int(ov[r.source].argmax())


def test_a_source_gets_its_top_destinations_and_top_outs() -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_vocab=30, seed=4)
    qk, ov = dense_circuits(model, 1, 0)
    profile = source_profile(model, 1, 0, source="<9>", k=4)
    assert profile.source == 9
    assert [t.token for t in profile.destinations] == torch.topk(qk[:, 9], 4).indices.tolist()
    assert [t.token for t in profile.outs] == torch.topk(ov[9], 4).indices.tolist()
    triples = skip_trigrams(model, 1, 0, k=3, source=9)
    assert len(triples) == 9
    assert (triples[0].destination, triples[0].out) == (profile.destinations[0].token, profile.outs[0].token)
    assert {(t.destination, t.out) for t in triples} == {
        (d.token, o.token) for d in profile.destinations[:3] for o in profile.outs[:3]
    }


def test_records_convert_to_a_dataframe() -> None:
    frame = skip_trigrams(make_random_model(), 0, 0, k=3).to_pandas()
    assert list(frame.columns) == [
        "source",
        "destination",
        "out",
        "source_str",
        "destination_str",
        "out_str",
        "qk",
        "ov",
        "copying",
    ]
    assert len(frame) == 3


def test_a_source_string_must_be_one_token() -> None:
    with pytest.raises(ArgumentError, match="source: expected a string that is exactly one token"):
        skip_trigrams(make_random_model(), 0, 0, source="<1> <2>")
    with pytest.raises(ArgumentError, match=r"source: expected an int in \[0, 50\), got 50"):
        skip_trigrams(make_random_model(), 0, 0, source=50)
