"""The activations a causal sweep patches (sites), the dims a sweep may run over, and the masks that pick a cell.

A site is a hook point of :meth:`circuitwidgets.CircuitModel.run_with_cache`
(TransformerLens's names). Its value, after the batch axis, has named axes:
``resid_*``/``attn_out``/``mlp_out`` ``[pos, d_model]``; ``q, k, v, z`` ``[pos, head, d_head]``;
``result`` ``[pos, head, d_model]``; ``pattern`` ``[head, pos (destination), src]`` (``dest`` is accepted for
its ``pos``, as TransformerLens's ``…_pattern_dest_src_pos`` names it);
``mlp_pre``/``mlp_post`` ``[pos, neuron]``. A sweep's ``by`` names ``layer``
and any of the site's ``pos``, ``head``, ``neuron``: one cell per combination, and
a cell patches exactly that slice (the other axes whole).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import TypeVar

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, WeightsAbsentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.hook_names import did_you_mean, parse_tl_name

#: Each site's named axes after the batch axis (``None``: an axis a cell never splits).
SITE_AXES: dict[str, tuple[str | None, ...]] = {
    "resid_pre": ("pos", None),
    "resid_mid": ("pos", None),
    "resid_post": ("pos", None),
    "attn_out": ("pos", None),
    "mlp_out": ("pos", None),
    "q": ("pos", "head", None),
    "k": ("pos", "head", None),
    "v": ("pos", "head", None),
    "z": ("pos", "head", None),
    "result": ("pos", "head", None),
    "pattern": ("head", "pos", "src"),
    "mlp_pre": ("pos", "neuron"),
    "mlp_post": ("pos", "neuron"),
}

_T = TypeVar("_T")

MLP_SITES = ("resid_mid", "mlp_out", "mlp_pre", "mlp_post")


@dataclass(frozen=True)
class Cells:
    """The cells of a sweep: ``by`` (dims, ``layer`` first in the result's order as given) and their sizes."""

    site: str
    by: tuple[str, ...]
    sizes: dict[str, int]

    @property
    def shape(self) -> tuple[int, ...]:
        """The result's shape, in the order of ``by``."""
        return tuple(self.sizes[d] for d in self.by)

    def at_layer(self) -> list[tuple[int, ...]]:
        """Indices (in ``by`` order, without ``layer``) of the cells of one layer."""
        rest = [d for d in self.by if d != "layer"]
        return list(product(*(range(self.sizes[d]) for d in rest)))

    @property
    def rest(self) -> tuple[str, ...]:
        """The dims other than ``layer``, in ``by`` order."""
        return tuple(d for d in self.by if d != "layer")

    @property
    def per_layer(self) -> int:
        """How many cells one layer has (the product of the other dims' sizes)."""
        return math.prod(self.sizes[d] for d in self.rest)

    @property
    def count(self) -> int:
        """How many cells the sweep has, computed from the sizes (no cell is built)."""
        return self.sizes["layer"] * self.per_layer

    def rows(self, start: int, stop: int, first: str | None = None) -> np.ndarray:
        """Cells ``start … stop − 1`` of one layer as indices ``[n, len(rest)]`` (columns in ``rest`` order).

        The order is :meth:`at_layer`'s, or with dim ``first`` varying slowest when given (and swept).
        """
        order = list(self.rest)
        if first in order:
            order.remove(first)
            order.insert(0, first)
        flat = np.arange(start, stop)
        if not order:
            return np.zeros((len(flat), 0), dtype=np.int64)
        columns = np.unravel_index(flat, tuple(self.sizes[d] for d in order))
        return np.stack([columns[order.index(d)] for d in self.rest], axis=1)

    def mask(
        self, cells: Sequence[tuple[int, ...]] | np.ndarray, value_shape: Sequence[int], device: torch.device
    ) -> torch.Tensor:
        """``[n, 1, *value_shape-with-ones]``: 1 on each cell's slice of a site value, 0 elsewhere."""
        axes = SITE_AXES[self.site]
        index = np.asarray(cells, dtype=np.int64).reshape(len(cells), len(self.rest))
        mask = torch.ones(len(cells), 1, *([1] * len(value_shape)), device=device)
        for j, dim in enumerate(self.rest):
            axis = axes.index(dim)
            idx = torch.as_tensor(index[:, j], device=device)
            onehot = torch.nn.functional.one_hot(idx, value_shape[axis]).float()
            shape = [len(cells), 1] + [1] * len(value_shape)
            shape[2 + axis] = value_shape[axis]
            mask = mask * onehot.view(shape)
        return mask


def site_alias(site: _T) -> _T | str:
    """``site`` with a layerless TransformerLens spelling (``"hook_z"``, ``"attn.hook_z"``) read as ours (``"z"``).

    A name with a layer (``"blocks.0.attn.hook_z"``) stays as it is, so the site
    check refuses it with a hint: a sweep's site names every layer at once.
    """
    if isinstance(site, str) and site not in SITE_AXES:
        parsed = parse_tl_name(site)
        if parsed is not None and parsed[1] is None and parsed[0] in SITE_AXES:
            return parsed[0]
    return site


def site_error(site: object) -> ArgumentError:
    """The error for an unknown ``site``: the sites, and "did you mean 'z'?" for a TransformerLens hook name."""
    hint = did_you_mean(site)
    if hint and isinstance(site, str) and site.startswith("blocks."):
        hint += " A sweep's site names every layer; by=('layer', ...) sweeps them (a result's dims include 'layer')"
    return ArgumentError(f"site: expected one of {sorted(SITE_AXES)}, got {site!r}{hint}")


def check_site(model: CircuitModel, site: object, by: object, n_pos: int) -> Cells:
    """The cells of ``site`` by ``by``, or a typed error naming the bad argument."""
    if not isinstance(site, str) or site not in SITE_AXES:
        raise site_error(site)
    if site in MLP_SITES and not model.cfg.has_mlp:
        raise ArgumentError(f"site: {site!r} needs a model with MLPs; {model.name!r} has none")
    if model.cfg.mlp_weights_absent:
        raise WeightsAbsentError(
            f"model: {model.name!r} was loaded without its MLP weights (from_hf(path, mlp=False)) and cannot be run; "
            "causal techniques need the whole model: circuitwidgets.from_hf(path)"
        )
    if isinstance(by, str):
        by = (by,)
    if not isinstance(by, (tuple, list)) or not all(isinstance(d, str) for d in by):
        raise ArgumentTypeError(f"by: expected a tuple of dim names such as ('layer', 'pos'), got {by!r}")
    if site == "pattern":  # TransformerLens's name for the destination position
        by = tuple("pos" if d == "dest" else d for d in by)
    allowed = {"layer", *(a for a in SITE_AXES[site] if a is not None)}
    bad = [d for d in by if d not in allowed]
    if bad or "layer" not in by or len(set(by)) != len(by):
        raise ArgumentError(
            f"by: site {site!r} sweeps over 'layer' and any of {sorted(allowed - {'layer'})} (each once), got {tuple(by)!r}"
        )
    cfg = model.cfg
    sizes = {"layer": cfg.n_layers, "pos": n_pos, "src": n_pos, "head": cfg.n_heads, "neuron": cfg.d_mlp or 0}
    return Cells(site, tuple(by), {d: sizes[d] for d in by})
