"""CircuitExplorer: every view of a model in one widget, linked in the front end.

One widget holds the data of the eigenvalue scatter, the attention patterns of
a text, the composition map, the skip-trigram table, term importance and the
head detectors' scores (:class:`~circuitwidgets.widgets.HeadScores`).
Selecting a head in any view updates the others in the browser (so linking
also works in exported HTML, with no kernel) and the kernel traits
``selected_layer`` / ``selected_head``.

State layout (derived, not restated)
------------------------------------
The explorer's traits are composed from its children's definitions
(:func:`circuitwidgets.widgets.core.spec.compose`): each child's data is one
dictionary trait, ``<prefix>_data``, whose arrays travel as binary buffers; each
of its settings and kernel replies is a flat trait ``<prefix>_<name>``
(``trigram_source_token``, ``composition_selected_edge``, …), a copy of the
child's own trait with its own validation; the head selection is shared.
``_children`` tells the front end the same names (``js/src/lib/scoped.ts``), so
each view runs unchanged inside the explorer, and :meth:`CircuitExplorer.view`
lets a child's own Python code (sizes, listings, observers) run on this state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import torch
import traitlets

from circuitwidgets._checks import check_model
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.widget import AttentionPatterns
from circuitwidgets.widgets.composition import CompositionMap
from circuitwidgets.widgets.core.arrays import _data_to_json
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.coalesce import coalesced
from circuitwidgets.widgets.core.compose import ScopedView, compose, scope_names
from circuitwidgets.widgets.core.context import build_progress, check_context
from circuitwidgets.widgets.core.offset import engine_offset, resolve_offset, validate_offset
from circuitwidgets.widgets.core.spec import spec_of
from circuitwidgets.widgets.eigen.widget import EigenScatter
from circuitwidgets.widgets.head_scores import HeadScores
from circuitwidgets.widgets.skip_trigrams.widget import SkipTrigramTable, TrigramSource
from circuitwidgets.widgets.term_importance import TermImportance

__all__ = ["CHILDREN", "CircuitExplorer"]

#: Most distinct tokens of the text precomputed as skip-trigram sources.
MAX_TEXT_SOURCES = 48

#: The views of the explorer, in the order the front end lays them out.
CHILDREN: tuple[type[CircuitWidget], ...] = (
    EigenScatter,
    AttentionPatterns,
    CompositionMap,
    SkipTrigramTable,
    TermImportance,
    HeadScores,
)

TextOrTokens = str | Sequence[int] | torch.Tensor

#: What the progress bar says during each child's build.
_STEP_NAMES: dict[type[CircuitWidget], str] = {
    EigenScatter: "eigenvalues and copying scores",
    AttentionPatterns: "attention patterns",
    CompositionMap: "composition",
    SkipTrigramTable: "skip-trigrams",
    TermImportance: "term importance",
    HeadScores: "head detectors",
}

#: How to look at a text longer than the model's context, said when one is refused.
_LONG_TEXT = (
    "the explorer shows one context; for a long document use AttentionPatterns on a window of it, "
    "or HeadScores.from_model(model, kind, tokens=[window_1, window_2, ...]) over equal-length windows"
)


class CircuitExplorer(CircuitWidget):
    """All views of a model on a text, linked: choose a head anywhere and the others follow.

    Parameters
    ----------
    model
        The model.
    text_or_tokens
        Text (or token ids ``[pos]``) for the attention patterns and term importance;
        its tokens are also precomputed as skip-trigram sources. (``text=`` is its former name.)
    k, profile_k
        Skip-trigram rows per circuit and per source (:func:`~circuitwidgets.widgets.skip_trigrams.widget.skip_trigram_data`).
    offset
        Rotary models: the offset ``Δ = i − j`` at which the scatter, the table
        and the composition map read QK circuits (default 0, shown in the views).
    trigram_heads
        Heads whose skip-trigrams are precomputed (default all; others are computed
        when selected in a live kernel).
    max_tokens, seed
        Token sample of the top-k copying rate, seed of the detectors and baselines
        (:func:`~circuitwidgets.widgets.eigen.widget.eigen_scatter_data`).
    progress_bar
        A progress bar over the build's steps (plain-text ``tqdm`` on stderr, never a widget in a
        notebook); ``None`` lets tqdm decide (shown when stderr is a terminal), ``False`` hides it.
    **kwargs
        Initial traits (for example ``selected_layer=1, selected_head=2``; the
        default selection is the head with the highest induction score).
    """

    _view = traitlets.Unicode("explorer").tag(sync=True)

    model_name = traitlets.Unicode("").tag(sync=True, role="data")
    """Name of the model."""

    _children = traitlets.List(traitlets.Dict(), default_value=scope_names(CHILDREN)).tag(sync=True)
    """Where each child view's traits live (read by the front end; derived from the children)."""

    # The children's data, settings, replies and the shared head selection (see the module docs).
    locals().update(compose(CHILDREN))

    _child_classes: ClassVar[tuple[type[CircuitWidget], ...]] = CHILDREN

    def __init__(
        self,
        model: CircuitModel,
        text_or_tokens: TextOrTokens | None = None,
        *,
        k: int = 20,
        profile_k: int = 8,
        trigram_heads: Iterable[tuple[int, int]] | None = None,
        max_tokens: int = 1024,
        seed: int = 0,
        progress_bar: bool | None = None,
        offset: int | None = None,
        text: TextOrTokens | None = None,
        **kwargs: Any,
    ) -> None:
        model = check_model(model, "CircuitExplorer")
        source = text if text_or_tokens is None else text_or_tokens
        ids = _token_ids(model, source)
        bos = model.tokenizer.bos_token_id
        text_sources = [t for t in dict.fromkeys(ids) if t != bos][:MAX_TEXT_SOURCES]
        check_context(model, len(ids), "text_or_tokens", _LONG_TEXT)
        self._views: dict[str, ScopedView] = {}
        self._model = model
        self._options: dict[str, Any] = {
            "max_tokens": max_tokens,
            "seed": seed,
            "k": k,
            "profile_k": profile_k,
            "heads": list(trigram_heads) if isinstance(trigram_heads, Iterator) else trigram_heads,
            "sources": text_sources,
        }
        trigram_heads = self._options["heads"]
        builds: dict[type[CircuitWidget], Callable[[], dict[str, Any]]] = {
            EigenScatter: lambda: EigenScatter.initial(model, max_tokens=max_tokens, seed=seed, offset=offset),
            AttentionPatterns: lambda: AttentionPatterns.initial(model, source),  # type: ignore[arg-type]
            CompositionMap: lambda: CompositionMap.initial(model, seed=seed, offset=offset),
            SkipTrigramTable: lambda: SkipTrigramTable.initial(
                model,
                k=k,
                profile_k=profile_k,
                heads=trigram_heads,
                sources=text_sources,
                progress_bar=False,
                offset=offset,
            ),
            TermImportance: lambda: TermImportance.initial(model, source),
            HeadScores: lambda: HeadScores.initial(model, "all", progress_bar=False),
        }
        initial: dict[type[CircuitWidget], dict[str, Any]] = {}
        with build_progress(len(CHILDREN) + 1, "CircuitExplorer", progress_bar) as step:
            for child in CHILDREN:
                step(_STEP_NAMES[child])
                initial[child] = builds[child]()
            state: dict[str, Any] = {"model_name": model.name}
            for child in reversed(CHILDREN):  # (the first child's head selection wins: the eigen scatter's)
                state.update(_split(child, initial[child]))
            trigrams = self.view("trigram")
            trigrams._source = TrigramSource(model, k, profile_k, offset=engine_offset(resolve_offset(model, offset)))
            trigrams._added = None
            # The children's data are computed at this offset: its initial traits must not recompute them.
            self._computed_offset: int | None = state.get("eigen_qk_offset")
            super().__init__(**{**state, **kwargs})
            self.on_msg(self._on_custom)
            step("skip-trigrams of the text's tokens")
            trigrams._fill()

    # ---------------------------------------------------------------- views
    def view(self, prefix: str) -> ScopedView:
        """The state of the child view with ``prefix`` (``"eigen"``, ``"trigram"``, …) under its own trait names."""
        views: dict[str, ScopedView] | None = getattr(self, "_views", None)
        if views is None:  # (validation may ask before __init__ has set it)
            views = self._views = {}
        if prefix not in views:
            child = next((c for c in CHILDREN if spec_of(c).prefix == prefix), None)
            if child is None:
                raise KeyError(f"no child view with prefix {prefix!r}")
            views[prefix] = ScopedView(self, child)
        return views[prefix]

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.view("eigen").n_layers)

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.view("eigen").n_heads)

    @property
    def d_vocab(self) -> int:
        """Vocabulary size."""
        return int(self.view("trigram").d_vocab)

    @property
    def trigram_n_rows(self) -> int:
        """Rows of the current skip-trigram listing."""
        return int(self.view("trigram").n_rows)

    @property
    def selected(self) -> tuple[int, int]:
        """``(layer, head)`` of the selected head."""
        return int(self.selected_layer), int(self.selected_head)

    # ------------------------------------------------------------ observers
    # The skip-trigram table's own observers, run on its state here.
    @traitlets.observe("selected_layer", "selected_head", "trigram_source_token")
    def _on_trigram_selection(self, change: traitlets.Bunch) -> None:
        name = change["name"].removeprefix("trigram_")
        SkipTrigramTable._on_head_or_source(self.view("trigram"), {**change, "name": name})  # type: ignore[arg-type]

    @traitlets.validate("eigen_qk_offset", "composition_qk_offset", "trigram_qk_offset")
    def _validate_offset(self, proposal: traitlets.Bunch) -> int:
        return validate_offset(self, getattr(self, "_model", None), int(proposal["value"]))

    @traitlets.observe("eigen_qk_offset", "composition_qk_offset", "trigram_qk_offset")
    @coalesced("qk_offset")  # the view's newest offset wins (core/coalesce.py)
    def _on_offset(self, change: traitlets.Bunch) -> None:
        """One rotary offset for the whole explorer: the views that read QK circuits recompute at it."""
        new, model = int(change["new"]), self._model
        if new == getattr(self, "_computed_offset", None) or getattr(self, "_offset_busy", False):
            return
        validate_offset(self, model, new)
        self._offset_busy = True
        at, options = engine_offset(new), self._options
        fresh = {
            EigenScatter: EigenScatter.initial(
                model, max_tokens=options["max_tokens"], seed=options["seed"], offset=at
            ),
            CompositionMap: CompositionMap.initial(model, seed=options["seed"], offset=at),
            SkipTrigramTable: SkipTrigramTable.initial(
                model,
                k=options["k"],
                profile_k=options["profile_k"],
                heads=options["heads"],
                sources=options["sources"],
                offset=at,
            ),
        }
        trigrams = self.view("trigram")
        trigrams._source.offset = at
        trigrams._added = None
        self._computed_offset = new
        with self.hold_trait_notifications():
            for child, state in fresh.items():
                prefix = spec_of(child).prefix
                setattr(
                    self,
                    f"{prefix}_data",
                    {**getattr(self, f"{prefix}_data"), **_split(child, state)[f"{prefix}_data"]},
                )
                setattr(self, f"{prefix}_qk_offset", new)
        self._offset_busy = False
        trigrams._fill()

    @traitlets.observe("trigram_source_query")
    def _on_query(self, change: traitlets.Bunch) -> None:
        SkipTrigramTable._on_query(self.view("trigram"), change)  # type: ignore[arg-type]

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        SkipTrigramTable._on_custom(self.view("trigram"), widget, content, buffers)  # type: ignore[arg-type]

    def state_sizes(self) -> dict[str, int]:
        """Bytes of each data trait as sent to the view (binary buffers plus JSON)."""
        return {
            f"{spec_of(child).prefix}_data": _wire_bytes(_data_to_json(getattr(self, f"{spec_of(child).prefix}_data")))
            for child in CHILDREN
        }


def _split(child: type[CircuitWidget], initial: dict[str, Any]) -> dict[str, Any]:
    """A child's initial traits as explorer traits: data into ``<prefix>_data``, the rest under their explorer names."""
    spec = spec_of(child)
    out: dict[str, Any] = {f"{spec.prefix}_data": {k: v for k, v in initial.items() if k in spec.data}}
    for name, value in initial.items():
        if name in spec.own:
            out[f"{spec.prefix}_{name}"] = value
        elif name in spec.heads:
            out[name] = value
    return out


def _token_ids(model: CircuitModel, text_or_tokens: Any) -> list[int]:
    """Token ids of the explorer's text (BOS prepended as the model does), or a typed error."""
    if isinstance(text_or_tokens, str) and text_or_tokens:
        return [int(t) for t in model.to_tokens(text_or_tokens)[0].tolist()]
    if (
        isinstance(text_or_tokens, (list, tuple, torch.Tensor))
        and len(text_or_tokens) > 0
        and not any(isinstance(t, str) for t in text_or_tokens)
    ):
        ids = torch.as_tensor(text_or_tokens)
        return [int(t) for t in ids.reshape(-1).tolist()]
    raise ArgumentError(f"text_or_tokens: expected a non-empty str or token ids, got {text_or_tokens!r:.80}")


def _wire_bytes(value: Any) -> int:
    """Bytes of a serialised value: buffers counted raw, everything else as compact JSON."""
    buffers = 0

    def strip(v: Any) -> Any:
        nonlocal buffers
        if isinstance(v, (bytes, bytearray, memoryview)):
            buffers += memoryview(v).nbytes
            return None
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [strip(x) for x in v]
        return v

    text = json.dumps(strip(value), separators=(",", ":"), ensure_ascii=False)
    return buffers + len(text.encode("utf-8"))
