"""How a model's heads formed during training: the induction-head phase change (Olsson et al., 2022).

The curves come from the model's training log (:mod:`circuitwidgets.training.history`):
held-out loss and the in-context-learning score over training steps, and, for
the selected head, its previous-token, induction and OV copying scores and its
strongest baseline-subtracted K-composition from the layer before. The steps
where the best induction score first reaches 10 %, 50 % and 90 % of its maximum
are marked: the phase change. Choosing a head anywhere (explorer, report,
:func:`circuitwidgets.link`) shows its curves.

Data traits (kernel → view): ``steps`` int32 ``[T]``; ``val_loss``, ``icl_score``
float32 ``[T]``; ``previous_token``, ``induction``, ``ov_copying``,
``k_composition`` float32 ``[T, n_layers, n_heads]`` (NaN where not logged);
``formation`` ``[start, step, end]`` or ``[]``; ``absent`` (why there is no
history, or ``""``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets

from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.training.history import TrainingHistory as History
from circuitwidgets.training.history import history_from_card, history_from_log
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, head_selection, view_data
from circuitwidgets.widgets.core.traits import Integer, SelectionIndex

__all__ = ["TrainingHistory", "training_history_data"]

CURVES = ("previous_token", "induction", "ov_copying", "k_composition")


def measure_words(n_ctx: int | None) -> str:
    """What the logged head scores measure, in the words the view shows under its curves.

    ``circuitwidgets train`` logs the detectors on 16 sequences of ``[BOS]`` and
    ``(n_ctx − 1) // 2`` random tokens repeated; :func:`circuitwidgets.circuits.head_scores`
    defaults to 8 sequences of 50, where a head's attention is spread over fewer
    earlier tokens, so its induction scores read higher for the same weights.
    """
    half = f"{(n_ctx - 1) // 2}" if n_ctx else "(context − 1) / 2"
    return (
        f"Head scores as logged during training: mean attention on 16 sequences of [BOS] and {half} random tokens "
        "repeated. circuits.head_scores (the head-scores view and the report's detector heatmaps) uses 8 sequences of 50 "
        "by default, which gives higher induction scores for the same weights."
    )


def training_history_data(
    history: History | None, absent: str = "", model_name: str = "", n_ctx: int | None = None
) -> dict[str, Any]:
    """Trait values of a :class:`TrainingHistory` (``history=None``: an empty view saying ``absent``)."""
    if history is None:
        empty = np.zeros((0, 0, 0), dtype=np.float32)
        return {
            "steps": np.zeros(0, dtype=np.int32),
            "val_loss": np.zeros(0, dtype=np.float32),
            "icl_score": np.zeros(0, dtype=np.float32),
            **{name: empty for name in CURVES},
            "formation": [],
            "absent": absent or "no training history",
            "model_name": model_name,
            "measure": "",
        }
    formation = history.formation()
    return {
        "steps": history.steps.astype(np.int32),
        "val_loss": history.val_loss.astype(np.float32),
        "icl_score": history.icl_score.astype(np.float32),
        **{name: getattr(history, name).astype(np.float32) for name in CURVES},
        "formation": [] if formation is None else [formation["start"], formation["step"], formation["end"]],
        "absent": "",
        "model_name": model_name,
        "measure": measure_words(n_ctx),
    }


def _strongest_induction_head(history: History | None) -> dict[str, int]:
    if history is None or history.n_layers < 2:
        return {}
    final = np.nan_to_num(history.induction[-1], nan=-np.inf)
    layer, head = np.unravel_index(int(np.argmax(final)), final.shape)
    return {"selected_layer": int(layer), "selected_head": int(head)}


class TrainingHistory(CircuitWidget):
    """Curves over training: loss, in-context learning, and the selected head's scores, with the phase change marked.

    Build it from a shipped model (:meth:`from_model`, :meth:`from_pretrained`),
    a card (:meth:`from_card`) or the ``log.jsonl`` records of a
    ``circuitwidgets train`` run (:meth:`from_log`). A model without a history
    (not trained by circuitwidgets, or an old card) gives a view that says so.
    """

    _view = traitlets.Unicode("history").tag(sync=True)
    _prefix = "history"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    steps = view_data(NDArrayTrait(dtype="int32", dims=("n_evals",)))
    """int32 ``[T]``: training step of each evaluation."""

    val_loss = view_data(NDArrayTrait(dtype="float32", dims=("n_evals",)))
    """float32 ``[T]``: held-out loss (nats)."""

    icl_score = view_data(NDArrayTrait(dtype="float32", dims=("n_evals",)))
    """float32 ``[T]``: in-context-learning score, late-token loss minus early-token loss (nats; NaN where not logged)."""

    previous_token = view_data(NDArrayTrait(dtype="float32", dims=("n_evals", "n_layers", "n_heads")))
    """float32 ``[T, L, H]``: previous-token score on repeated random tokens."""

    induction = view_data(NDArrayTrait(dtype="float32", dims=("n_evals", "n_layers", "n_heads")))
    """float32 ``[T, L, H]``: induction score on repeated random tokens."""

    ov_copying = view_data(NDArrayTrait(dtype="float32", dims=("n_evals", "n_layers", "n_heads")))
    """float32 ``[T, L, H]``: OV eigenvalue copying score."""

    k_composition = view_data(NDArrayTrait(dtype="float32", dims=("n_evals", "n_layers", "n_heads")))
    """float32 ``[T, L, H]``: strongest baseline-subtracted K-composition into the head (NaN in layer 0)."""

    formation = view_data(traitlets.List(Integer()))
    """``[start, step, end]``: steps where the best induction score first reaches 10 %, 50 %, 90 % of its maximum; ``[]`` if none."""

    absent = view_data(traitlets.Unicode(""))
    """Why there is no history (shown instead of the curves), or ``""``."""

    measure = view_data(traitlets.Unicode(""))
    """What the head scores measure (shown under the curves): the logged detectors differ from ``circuits.head_scores``'s defaults."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the head whose curves are drawn."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Head whose curves are drawn, within its layer."""

    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    @classmethod
    def from_card(cls, card: object, *, model_name: str = "", **kwargs: Any) -> TrainingHistory:
        """The history in a model card (``card["training"]["log"]``); a missing or malformed one gives a view that says so."""
        history, why = history_from_card(card)
        name = model_name or (str(card.get("name", "")) if isinstance(card, dict) else "")
        training = card.get("training") if isinstance(card, dict) else None
        n_ctx = training.get("n_ctx") if isinstance(training, dict) else None
        data = training_history_data(history, why, name, n_ctx if isinstance(n_ctx, int) else None)
        return cls(**{**data, **_strongest_induction_head(history), **kwargs})

    @classmethod
    def from_log(cls, records: object, *, model_name: str = "", **kwargs: Any) -> TrainingHistory:
        """The history of a ``circuitwidgets train`` run: the records of its ``log.jsonl``."""
        history, why = history_from_log(records)
        return cls(
            **{**training_history_data(history, why, model_name), **_strongest_induction_head(history), **kwargs}
        )

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> TrainingHistory:
        """The history of a shipped model (:func:`circuitwidgets.list_pretrained`)."""
        from circuitwidgets.sources.pretrained import pretrained_card

        return cls.from_card(pretrained_card(name), model_name=name, **kwargs)

    @classmethod
    def from_model(cls, model: CircuitModel, **kwargs: Any) -> TrainingHistory:
        """The history of ``model`` when it is a shipped model; otherwise a view saying there is none."""
        from circuitwidgets.sources.pretrained import list_pretrained

        if not isinstance(model, CircuitModel):
            raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
        if model.name in list_pretrained():
            return cls.from_pretrained(model.name, **kwargs)
        reason = f"{model.name!r} was not trained by circuitwidgets train, so there is no training history"
        return cls(**{**training_history_data(None, reason, model.name), **kwargs})
