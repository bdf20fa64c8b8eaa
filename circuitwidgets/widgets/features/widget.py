"""FeatureDashboard: one unit at a time (feature, neuron or head) out of every unit of a layer.

For the selected unit: its top contexts with each token shaded by the unit's
activation (token text shown as text, escaped), a random sample of its active
contexts labelled by quantile, the histogram of its positive activations, the
tokens it promotes and suppresses (its output direction through the final norm
and ``W_U``) and the nearby units by decoder cosine. A picker switches units in
the browser (a number, arrows, or a search by token over the top contexts and
promoted tokens), with no kernel. ``selected_feature`` is linked by
:func:`circuitwidgets.link` to a :class:`PromptFeatures` of the same site.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import traitlets

from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.examples import Examples, max_activating
from circuitwidgets.features.units import Units, dictionary_features
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex
from circuitwidgets.widgets.features.data import dashboard_data, dense_units

__all__ = ["FeatureDashboard"]


class FeatureDashboard(CircuitWidget):
    """Dashboards of every unit of a layer: top contexts, sample, histogram, logit effects, nearby units.

    Parameters
    ----------
    examples
        A ``circuitwidgets.features.max_activating`` result.
    model
        The model the examples were read from (its tokenizer and unembedding).
    dictionary
        The ``circuitwidgets.features.Dictionary`` when the units are its
        features (its decoder gives their logit effects and neighbours).
    n_logits, n_nearby
        Promoted / suppressed tokens and nearby units kept per unit.
    **kwargs
        Initial traits (``selected_feature``).
    """

    _view = traitlets.Unicode("featuredashboard").tag(sync=True)
    _prefix = "featuredashboard"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""
    site = view_data(traitlets.Unicode(""))
    """What the units are (``L1.tc``, ``L1 neurons``): views of the same site link their ``selected_feature``."""
    unit_prefix = view_data(traitlets.Unicode(""))
    """Unit ``i`` is called ``unit_prefix + str(i)``."""
    kind = view_data(traitlets.Unicode(""))
    """``feature``, ``neuron`` or ``head``."""
    vocab = view_data(traitlets.List(traitlets.Unicode()))
    """Token strings the arrays index (untrusted text, shown as text); index ``len(vocab)`` is no token."""
    ctx_tokens = view_data(NDArrayTrait(dims=("n_units", "n_examples", "width")))
    """uint16/uint32 ``[n_units, n_examples, width]``: each example's window, indices into ``vocab``."""
    ctx_shade = view_data(NDArrayTrait(dtype="uint8", dims=("n_units", "n_examples", "width")))
    """uint8: the unit's activation over each window, 255 at the unit's largest (clipped below at 0)."""
    ex_value = view_data(NDArrayTrait(dtype="float32", dims=("n_units", "n_examples")))
    """float32: the activation at each example's centre token (NaN where the unit had fewer examples)."""
    ex_quantile = view_data(NDArrayTrait(dtype="float32", dims=("n_units", "n_examples")))
    """float32: a sampled example's quantile among the unit's positive activations (NaN for the top ones)."""
    n_top = view_data(traitlets.Int(0))
    """The first ``n_top`` examples are the top ones, the rest the random sample."""
    centre = view_data(traitlets.Int(0))
    """Index of the example's own token in its window."""
    unit_max = view_data(NDArrayTrait(dtype="float32", dims=("n_units",)))
    """float32: each unit's largest activation seen (the shade's 255)."""
    density = view_data(NDArrayTrait(dtype="float32", dims=("n_units",)))
    """float32: fraction of tokens where each unit is positive."""
    hist = view_data(NDArrayTrait(dtype="uint32", dims=("n_units", "n_bins")))
    """uint32: counts of positive activations per log-spaced bin."""
    hist_edges = view_data(NDArrayTrait(dtype="float32", dims=("n_edges",)))
    """float32 ``[n_bins + 1]``: the bins' edges."""
    logit_up = view_data(NDArrayTrait(dtype="int32", dims=("n_units", "n_logits")))
    """int32: the tokens each unit's output direction raises most (indices into ``vocab``)."""
    logit_up_value = view_data(NDArrayTrait(dtype="float32", dims=("n_units", "n_logits")))
    """float32: their logit change per unit of activation, through the final norm at its mean scale on the corpus."""
    logit_down = view_data(NDArrayTrait(dtype="int32", dims=("n_units", "n_logits")))
    """int32: the tokens it lowers most."""
    logit_down_value = view_data(NDArrayTrait(dtype="float32", dims=("n_units", "n_logits")))
    """float32: their (negative) logit change."""
    nearby = view_data(NDArrayTrait(dtype="int32", dims=("n_units", "n_nearby")))
    """int32: the units whose output directions are closest by cosine."""
    nearby_cos = view_data(NDArrayTrait(dtype="float32", dims=("n_units", "n_nearby")))
    """float32: those cosines."""
    n_tokens_read = view_data(traitlets.Int(0))
    """Tokens of the corpus read."""
    dense_share = view_data(traitlets.Float(0.0))
    """Units active on more than this share of the tokens read are marked dense (0: none marked)."""

    selected_feature = view_setting(SelectionIndex("n_units"))
    """The unit shown (linked with other views of the same ``site``)."""

    n_units = Size("n_units")
    n_examples = Size("n_examples")

    def __init__(
        self,
        examples: Examples | None = None,
        model: CircuitModel | None = None,
        dictionary: Dictionary | None = None,
        *,
        n_logits: int = 10,
        n_nearby: int = 8,
        **kwargs: Any,
    ) -> None:
        if examples is not None:
            if not isinstance(model, CircuitModel):
                raise ArgumentTypeError(f"model: expected the CircuitModel of the examples, got {type(model).__name__}")
            kwargs = {**dashboard_data(model, examples, dictionary, n_logits=n_logits, n_nearby=n_nearby), **kwargs}
        super().__init__(**kwargs)

    @classmethod
    def from_model(
        cls,
        model: CircuitModel,
        units: Units | Dictionary,
        tokens: torch.Tensor,
        *,
        k: int = 20,
        samples: int = 10,
        batch_size: int = 32,
        workers: int = 1,
        progress: bool = True,
        **kwargs: Any,
    ) -> FeatureDashboard:
        """Run ``circuitwidgets.features.max_activating`` over ``tokens`` ``[n_rows, n_ctx]`` and show it
        (``workers``: threads reading batches at once, as there)."""
        dictionary = units if isinstance(units, Dictionary) else None
        read = dictionary_features(model, units) if isinstance(units, Dictionary) else units
        examples = max_activating(
            model, tokens, read, k=k, samples=samples, batch_size=batch_size, workers=workers, progress=progress
        )
        return cls(examples, model, dictionary, **kwargs)

    def label(self, unit: int | None = None) -> str:
        """Name of ``unit`` (the selected one by default)."""
        return f"{self.unit_prefix}{self.selected_feature if unit is None else unit}"

    def top_contexts(self, unit: int | None = None) -> list[tuple[float, list[str]]]:
        """``(activation, window tokens)`` of ``unit``'s top examples, best first (the selected unit by default)."""
        u = self.selected_feature if unit is None else unit
        out = []
        for slot in range(self.n_top):
            value = float(self.ex_value[u, slot])
            if np.isnan(value):
                break
            ids = self.ctx_tokens[u, slot]
            out.append((value, [self.vocab[int(i)] for i in ids if int(i) < len(self.vocab)]))
        return out

    def promoted(self, unit: int | None = None) -> list[tuple[str, float]]:
        """``(token, logit change)`` of the tokens ``unit`` raises most."""
        u = self.selected_feature if unit is None else unit
        return [(self.vocab[int(i)], float(v)) for i, v in zip(self.logit_up[u], self.logit_up_value[u], strict=True)]

    def search(self, text: str) -> list[int]:
        """Units whose top example's own token, or a promoted token, contains ``text`` (as the view's search)."""
        return [unit for unit, _ in self.search_tokens(text)]

    def search_tokens(self, text: str) -> list[tuple[int, str]]:
        """``(unit, matched token)`` of :meth:`search`: the token each hit is labelled by in the view (its top
        example's own token when that matches, else the first promoted token that does)."""
        hits = []
        for u in range(self.n_units):
            centre = int(self.ctx_tokens[u, 0, self.centre]) if self.n_examples else len(self.vocab)
            tokens = [self.vocab[centre]] if centre < len(self.vocab) else []
            tokens += [self.vocab[int(i)] for i in self.logit_up[u]]
            matched = next((t for t in tokens if text in t), None)
            if matched is not None:
                hits.append((u, matched))
        return hits

    @property
    def dense(self) -> list[int]:
        """Units active on more than ``dense_share`` of the tokens read (marked dense in the view)."""
        return [int(u) for u in dense_units(self.density, self.dense_share)] if self.dense_share > 0 else []
