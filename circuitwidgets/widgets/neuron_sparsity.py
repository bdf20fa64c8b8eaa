"""NeuronSparsity: how often each MLP neuron of a layer fires, in two or more twin models, as histograms.

Data traits (kernel → view): ``model_names`` (untrusted text, shown as text), ``site`` (``"L0 neurons"``, as a
:class:`~circuitwidgets.FeatureDashboard` over the same neurons names it), ``rates`` float32 ``[n_models,
n_units]``: per neuron, the fraction of the tokens read on which it fires
(:func:`~circuitwidgets.activations.neuron_basis.firing_rates`: above its median by more than ``level`` of its
range, so GELU's and SoLU's scales compare), ``n_tokens_read``. Selection (view ↔ kernel): ``selected_feature``,
the neuron marked in every histogram: a click on a bar selects a neuron of that bin (the next one at each click),
and :func:`circuitwidgets.link` with ``twins=True`` moves the linked dashboards to it. The view bins the rates
itself (log-spaced), so it needs no kernel in an exported page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import traitlets

from circuitwidgets._checks import check_int
from circuitwidgets.activations.neuron_basis import firing_rates, neuron_activations
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex

__all__ = ["NeuronSparsity"]


class NeuronSparsity(CircuitWidget):
    """Per-neuron firing-rate histograms of one layer in twin models (SoLU against GELU); build with
    :meth:`from_models`."""

    _view = traitlets.Unicode("neuronsparsity").tag(sync=True)
    _prefix = "neuronsparsity"
    _links_heads = False

    model_names = view_data(traitlets.List(traitlets.Unicode()))
    """The models, one histogram each (shown as text)."""
    site = view_data(traitlets.Unicode(""))
    """``"L{layer} neurons"``: views of the same site link their ``selected_feature``."""
    rates = view_data(NDArrayTrait(dtype="float32", dims=("n_models", "n_units")))
    """float32 ``[n_models, n_units]``: each neuron's firing rate (share of tokens read)."""
    level = view_data(traitlets.Float(0.2))
    """A neuron fires where it is above its median by more than this share of its range (median to max)."""
    n_tokens_read = view_data(traitlets.Int(0))
    """Tokens the rates were measured on."""

    selected_feature = view_setting(SelectionIndex("n_units", optional=True, default_value=0))
    """The neuron marked in every histogram, -1 for none (linked with dashboards of the same ``site``)."""

    n_units = Size("n_units")

    @classmethod
    def from_models(
        cls, models: Sequence[CircuitModel], tokens: torch.Tensor, layer: int = 0, level: float = 0.2, **kwargs: Any
    ) -> NeuronSparsity:
        """Measure every neuron of ``layer`` in each of ``models`` (twins: as many neurons) on ``tokens``
        ``[batch, pos]``."""
        if isinstance(models, CircuitModel) or not isinstance(models, Sequence) or len(models) < 1:
            raise ArgumentTypeError(f"models: expected a list of CircuitModels, got {type(models).__name__}")
        for i, model in enumerate(models):
            if not isinstance(model, CircuitModel):
                raise ArgumentTypeError(f"models[{i}]: expected a CircuitModel, got {type(model).__name__}")
            if model.cfg.d_mlp != models[0].cfg.d_mlp or not model.cfg.d_mlp:
                raise ArgumentError(
                    f"models[{i}]: expected a model with MLP neurons, as many as models[0] ({models[0].cfg.d_mlp}), "
                    f"got {model.name!r} with d_mlp {model.cfg.d_mlp}"
                )
            check_int("layer", layer, 0, model.cfg.n_layers)
        rates = np.stack([firing_rates(neuron_activations(m, tokens, layer), level).numpy() for m in models])
        data: dict[str, Any] = {
            "model_names": [m.name for m in models],
            "site": f"L{layer} neurons",
            "rates": rates.astype(np.float32),
            "level": float(level),
            "n_tokens_read": int(tokens.numel()),
        }
        return cls(**{**data, **kwargs})
