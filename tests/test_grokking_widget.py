"""The grokking scrubber's traits: what the view needs to scrub offline, from a live run."""

from __future__ import annotations

import numpy as np
import pytest

from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.training import grokking
from circuitwidgets.widgets import GrokkingScrubber


def test_scrubber_carries_every_checkpoint_and_the_phases() -> None:
    run = grokking.train(11, 0.5, steps=40, d_model=8, n_heads=2, d_head=4, d_mlp=16, checkpoint_every=10)
    w = GrokkingScrubber.from_history(run)
    assert w.checkpoint_steps.tolist() == [0, 10, 20, 30, 40]
    assert w.fourier_norms.shape == (5, 6) and w.neuron_frequency.shape == (5, 16, 6)
    assert w.neuron_frequency.dtype == np.float16
    assert w.selected_checkpoint == 4 and len(w.phases) == 3
    m = grokking.progress_measures(run)
    assert np.allclose(w.restricted_loss, m.restricted_loss, rtol=1e-6)
    w.selected_checkpoint = 0
    with pytest.raises(Exception, match="selected_checkpoint"):
        w.selected_checkpoint = 5
    with pytest.raises(ArgumentTypeError, match="history"):
        GrokkingScrubber.from_history("run")  # type: ignore[arg-type]
