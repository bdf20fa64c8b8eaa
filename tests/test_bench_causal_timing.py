"""The causal benchmark's timing rule (``benchmarks/_causal_common.measure``): how many calls a measurement makes.

A quick call goes on past ``repeats`` until the calls after the warm-up took ``MIN_SECONDS`` (at most 100 calls), as
the floor's layer is timed; a call that alone spends the budget is the whole measurement; neither rule runs past the
budget. Calls are ``time.sleep``s on the wall clock: a sleep lasts at least its length, so the counts below hold on a
loaded machine too.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def common() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _causal_common

        return _causal_common
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_a_quick_call_is_timed_until_its_calls_took_the_floors_seconds(common: ModuleType) -> None:
    clock = common.Clock(torch.device("cpu"), "wall", repeats=3, budget=10.0)
    m = common.measure(clock, lambda: time.sleep(0.01), "quick")
    timed = sum(m.wall[1:])
    assert timed >= common.MIN_SECONDS, m.wall
    assert timed - m.wall[-1] < common.MIN_SECONDS, "one call more than the rule asks"
    assert m.seconds == float(np.median(m.wall[1:]))  # the median of the calls after the warm-up


def test_a_quick_call_stops_at_100_calls(common: ModuleType) -> None:
    clock = common.Clock(torch.device("cpu"), "wall", repeats=3, budget=10.0)
    m = common.measure(clock, lambda: None, "instant")
    assert len(m.wall) == 100


def test_a_call_that_spends_the_budget_is_the_whole_measurement(common: ModuleType) -> None:
    clock = common.Clock(torch.device("cpu"), "wall", repeats=3, budget=0.05)
    m = common.measure(clock, lambda: time.sleep(0.06), "long")
    assert len(m.wall) == 1
    assert m.seconds == m.wall[0]


def test_the_quick_rule_never_runs_past_the_budget(common: ModuleType) -> None:
    clock = common.Clock(torch.device("cpu"), "wall", repeats=3, budget=0.1)
    m = common.measure(clock, lambda: time.sleep(0.03), "mid")
    assert sum(m.wall) - m.wall[-1] < 0.1, m.wall  # the last call began before the budget was spent
    assert sum(m.wall[1:]) < common.MIN_SECONDS  # so the 0.25 s rule was cut short by the budget
