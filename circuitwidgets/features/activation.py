"""The four sparsifying activations of a dictionary, as SAELens defines them.

Each maps the encoder's pre-activations ``pre = x W_enc + b_enc`` (``[..., d_sae]``)
to feature activations (``>= 0`` for every threshold ``>= 0``):

- ``relu``: ``max(pre, 0)``;
- ``topk``: per row, the ``k`` largest pre-activations after a ReLU, every other one 0;
- ``batchtopk``: over all rows at once, the ``k · rows`` largest (after a ReLU), so a
  row may hold more or fewer than ``k``; at inference a fitted threshold replaces the
  batch (``pre`` where ``pre > threshold``), which makes each row independent of its batch;
- ``jumprelu``: ``pre`` where ``pre > threshold``, else 0.
"""

from __future__ import annotations

import torch

#: The activation names a dictionary accepts (SAELens's ``architecture`` names, lower case).
ACTIVATIONS = ("topk", "batchtopk", "jumprelu", "relu")


def topk_entries(pre: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, indices)`` ``[..., k]``: each row's ``k`` largest pre-activations after a ReLU and their features.

    The only entries of :func:`topk_rows` that may be nonzero (a value of 0 is a feature the ReLU zeroed).
    """
    top = torch.topk(pre, min(k, pre.shape[-1]), dim=-1)
    return top.values.relu(), top.indices


def topk_rows(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Keep each row's ``k`` largest entries of ``relu(pre)`` (ties: ``torch.topk``'s choice), zero the rest."""
    values, indices = topk_entries(pre, k)
    return torch.zeros_like(pre).scatter(-1, indices, values)


def batch_topk(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k · rows`` largest entries of ``relu(pre)`` over all rows (leading dims flattened)."""
    acts = pre.relu()
    flat = acts.reshape(-1)
    rows = flat.numel() // pre.shape[-1]
    top = torch.topk(flat, min(k * rows, flat.numel()), dim=-1)
    return torch.zeros_like(flat).scatter(-1, top.indices, top.values).reshape(pre.shape)


def jump(pre: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """``pre`` where ``pre > threshold`` (per feature), else 0."""
    return pre * (pre > threshold)


def apply_activation(
    name: str, pre: torch.Tensor, k: int | None, threshold: torch.Tensor | None, *, batch: bool = False
) -> torch.Tensor:
    """Feature activations from pre-activations under activation ``name``.

    ``batch=True`` makes ``batchtopk`` take its top-k over the batch even when a
    threshold is fitted (training); otherwise a fitted threshold is used.
    """
    if name == "relu":
        return pre.relu()
    if name == "jumprelu":
        assert threshold is not None
        return jump(pre, threshold)
    assert k is not None
    if name == "topk":
        return topk_rows(pre, k)
    if threshold is not None and not batch:
        return jump(pre, threshold)
    return batch_topk(pre, k)
