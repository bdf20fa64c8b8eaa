"""How readable a model's MLP neurons are: the measures that compare a SoLU model with its GELU twin.

All on held-out tokens ``[batch, pos]``, for one layer's neurons:

- :func:`firing_rates`: per neuron, the fraction of tokens on which it fires,
  where "fires" means above its median by more than ``level`` of its range
  (median to max) on these tokens: free of each activation's scale and offset,
  so GELU's ``post`` and SoLU's LayerNormed ``post`` are comparable.
- :func:`top_token_purity`: per neuron, the share of its ``k`` largest
  activations that fall on its single most frequent token there. The glossary's
  main monosemanticity test is reading a neuron's max-activating examples; a
  neuron whose top examples are all one token reads as one thing there, and the
  share needs no labels. (It inherits that test's blind spot: it says nothing of
  a neuron's weaker activations.)
- :func:`lateral_inhibition`: raise one neuron's pre-activation and measure the
  mean change of every other neuron's ``post``: zero for an elementwise
  activation, negative for SoLU's softmax (and its LayerNorm).
- :func:`loss_with_average_ln_scale`: SoLU's LayerNorm over the neurons with
  its per-token scale replaced by its mean over the tokens; the loss before and
  after says how much the model relies on the norm's rescaling.
"""

from __future__ import annotations

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook


def next_token_loss(model: CircuitModel, tokens: torch.Tensor) -> float:
    """Mean next-token cross-entropy on ``tokens`` ``[batch, pos]``."""
    logits = model(tokens).double()
    return float(torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()))


def neuron_activations(model: CircuitModel, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """``post`` of layer ``layer``'s neurons, ``[token, neuron]`` (all positions, flattened)."""
    layer = check_int("layer", layer, 0, model.cfg.n_layers)
    _, cache = model.run_with_cache(tokens, names=["mlp_post"])
    return cache["mlp_post", layer].flatten(0, 1).double()


def firing_rates(acts: torch.Tensor, level: float = 0.2) -> torch.Tensor:
    """Per neuron, the fraction of tokens with ``a > median + level · (max − median)`` (``acts``: ``[token, neuron]``)."""
    if not 0.0 < level < 1.0:
        raise ArgumentError(f"level: expected a number in (0, 1), got {level!r}")
    median = acts.median(dim=0).values
    top = acts.max(dim=0).values
    return (acts > median + level * (top - median)).double().mean(dim=0)


def top_token_purity(acts: torch.Tensor, token_ids: torch.Tensor, k: int = 20) -> torch.Tensor:
    """Per neuron, the share of its ``k`` largest activations on its most frequent token among them."""
    k = check_int("k", k, 1, acts.shape[0] + 1)
    top = acts.topk(k, dim=0).indices  # [k, neuron]
    toks = token_ids.flatten()[top]  # [k, neuron]
    same = (toks[:, None, :] == toks[None, :, :]).sum(dim=1)  # [k, neuron]: how often each top token recurs
    return same.max(dim=0).values.double() / k


def lateral_inhibition(model: CircuitModel, tokens: torch.Tensor, layer: int, neuron: int, delta: float) -> float:
    """Mean change of the other neurons' ``post`` when ``neuron``'s pre-activation is raised by ``delta``."""
    layer = check_int("layer", layer, 0, model.cfg.n_layers)
    neuron = check_int("neuron", neuron, 0, int(model.cfg.d_mlp or 0))
    base = neuron_activations(model, tokens, layer)

    def raise_one(pre: torch.Tensor) -> torch.Tensor:
        out = pre.clone()
        out[..., neuron] += delta
        return out

    seen: list[torch.Tensor] = []
    model.run_with_hooks(tokens, {("mlp_pre", layer): raise_one, ("mlp_post", layer): lambda v: seen.append(v)})
    raised = seen[0].flatten(0, 1).double()
    others = torch.ones(base.shape[1], dtype=torch.bool)
    others[neuron] = False
    return float((raised - base)[:, others].mean())


def loss_with_average_ln_scale(model: CircuitModel, tokens: torch.Tensor) -> tuple[float, float]:
    """``(loss, loss with SoLU's LayerNorm scale fixed to its mean)`` on ``tokens`` (every layer's)."""
    if model.cfg.act_fn != "solu_ln":
        raise ArgumentError(f"model: expected a SoLU model (act_fn 'solu_ln'), got act_fn {model.cfg.act_fn!r}")
    eps = model.cfg.ln_eps
    _, cache = model.run_with_cache(tokens, names=["mlp_mid"])
    scales = [
        (cache["mlp_mid", layer].var(dim=-1, unbiased=False) + eps).sqrt().mean() for layer in range(model.cfg.n_layers)
    ]
    mids: dict[int, torch.Tensor] = {}
    hooks: dict[tuple[str, int | None], Hook] = {}
    for layer in range(model.cfg.n_layers):
        w, b = model.weight("ln_mlp_w"), model.weight("ln_mlp_b")
        assert w is not None and b is not None  # a solu_ln model always has them (required_names)
        w, b = w[layer], b[layer]

        def keep(v: torch.Tensor, layer: int = layer) -> None:
            mids[layer] = v

        def fixed(v: torch.Tensor, layer: int = layer, w: torch.Tensor = w, b: torch.Tensor = b) -> torch.Tensor:
            mid = mids[layer]
            return (mid - mid.mean(dim=-1, keepdim=True)) / scales[layer] * w + b

        hooks[("mlp_mid", layer)] = keep
        hooks[("mlp_post", layer)] = fixed
    logits = model.run_with_hooks(tokens, hooks).double()
    after = float(torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()))
    return next_token_loss(model, tokens), after
