"""``graphs.check_by_intervention``: the graph's predicted change of its target for its most influential features,
beside the change measured in the model, on a held-out prompt of a random float64 model: the direct part equals
the prediction to float tolerance, the rank correlations are computed, every target kind is read."""

from __future__ import annotations

import math

import pytest
import torch
from _graphs import mlp_model, random_transcoders

from circuitwidgets.graphs import check_by_intervention

HELD_OUT = [0, 3, 8, 14, 3, 8, 21, 2, 14, 30, 3]


@pytest.mark.parametrize(("target", "n"), [(None, 20), (("t3", "t8"), 4)])
def test_direct_part_is_exact_and_ranks_are_reported(target: object, n: int) -> None:
    model = mlp_model(seed=2)
    tcs = random_transcoders(model, seed=5)
    check = check_by_intervention(model, tcs, torch.tensor(HELD_OUT), n=n, target=target, max_feature_nodes=None)
    assert len(check.rows) == n
    assert check.direct_error < 1e-9
    assert max(abs(r[3]) for r in check.rows) > 1e-3  # (predictions that are all zero would agree trivially)
    assert -1 <= check.rank_frozen <= 1 and -1 <= check.rank_free <= 1 and not math.isnan(check.rank_free)
    influences = [r[2] for r in check.rows]
    assert influences == sorted(influences, reverse=True)
    text = check.table()
    assert text.count("\n") == n + 2 and "rank correlation" in text
