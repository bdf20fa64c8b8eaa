"""Int and count traits refuse bools, from the view (even equal to the current value) and from Python."""

from __future__ import annotations

import json
from typing import Any

import pytest
import traitlets
from _comm import Recorder, from_view
from conftest import make_random_model

from circuitwidgets.widgets import CircuitExplorer, CompositionMap
from circuitwidgets.widgets.core.traits import Count, Integer


@pytest.fixture(scope="module")
def composition() -> CompositionMap:
    return CompositionMap(make_random_model(n_layers=2, n_heads=2))


@pytest.mark.parametrize("sent", [True, False])
def test_a_bool_equal_to_the_current_count_is_refused_from_the_view(
    composition: CompositionMap, monkeypatch: pytest.MonkeyPatch, sent: bool
) -> None:
    monkeypatch.setattr(composition, "_send", Recorder())
    composition.n_edges = int(sent) or 1
    from_view(composition, n_edges=sent)
    assert type(composition.n_edges) is int
    assert '"n_edges": true' not in json.dumps(composition.get_state(["n_edges"]))


def test_the_explorer_count_refuses_a_bool_equal_to_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_vocab=20)
    explorer = CircuitExplorer(model, list(range(1, 9)), k=2, profile_k=2)
    monkeypatch.setattr(explorer, "_send", Recorder())
    explorer.composition_n_edges = 1
    from_view(explorer, composition_n_edges=True)
    assert type(explorer.composition_n_edges) is int
    assert explorer.get_state(["composition_n_edges"])["composition_n_edges"] is not True


class _Holder(traitlets.HasTraits):
    count = Count(1, 10, default_value=1)
    number = Integer(0)
    numbers = traitlets.List(Integer())


@pytest.mark.parametrize(
    ("name", "value"), [("count", True), ("number", True), ("number", False), ("numbers", [1, True])]
)
def test_bools_are_refused_from_python(name: str, value: Any) -> None:
    holder = _Holder()
    with pytest.raises(traitlets.TraitError, match=r"expected an int, got (True|False) \(bool\)"):
        setattr(holder, name, value)


def test_numpy_integers_are_still_ints() -> None:
    import numpy as np

    holder = _Holder()
    holder.number = np.int64(3)  # type: ignore[assignment]
    assert type(holder.number) is int and holder.number == 3
