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
- :func:`feature_neuron_alignment`: per feature of a transcoder of the layer,
  the largest cosine of its encoder direction with a neuron's input direction
  (and of its decoder direction with a neuron's output direction): how far the
  sparse features the dictionary finds are single neurons.
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


def _unit_columns(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    unit: torch.Tensor = x / x.norm(dim=0, keepdim=True).clamp_min(1e-12)
    return unit


def feature_neuron_alignment(
    model: CircuitModel, layer: int, encoder: torch.Tensor, decoder: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per feature, ``(max cosine of its encoder direction with a neuron's W_in column, max |cosine| of its
    decoder row with a neuron's W_out row)``, each ``[n_features]`` float64.

    ``encoder`` ``[d_model, n_features]`` reads the MLP's normalised input (``mlp_in``, the space ``W_in``
    reads) and ``decoder`` ``[n_features, d_model]`` writes ``mlp_out`` (the space ``W_out`` writes): a
    transcoder's ``W_enc`` and ``W_dec``. The encoder's cosine is signed: a feature that reads a neuron's
    direction fires where that neuron does, one that reads its negative does not. The decoder's is taken up
    to sign: a neuron writes its row scaled by its activation, which SoLU's LayerNorm (a per-neuron gain of
    either sign) and GELU's negative lobe can make negative, so either sign of the row is that neuron's output.
    """
    layer = check_int("layer", layer, 0, model.cfg.n_layers)
    w_in, w_out = model.weight("W_in"), model.weight("W_out")
    if w_in is None or w_out is None:
        raise ArgumentError(f"model: expected a model with MLP neurons (W_in, W_out), got {model.name!r} without")
    d_model, d_mlp = w_in.shape[1], w_in.shape[2]
    for name, value, rows in (("encoder", encoder, d_model), ("decoder", decoder.T, d_model)):
        if value.ndim != 2 or value.shape[0] != rows or not torch.isfinite(value).all():
            raise ArgumentError(
                f"{name}: expected finite {'[d_model, n]' if name == 'encoder' else '[n, d_model]'} directions "
                f"with d_model {rows} (the layer's {d_mlp} neurons read and write d_model), got shape "
                f"{tuple(value.shape) if name == 'encoder' else tuple(decoder.shape)}"
            )
    if encoder.shape[1] != decoder.shape[0]:
        raise ArgumentError(
            f"decoder: expected one row per encoder column ({encoder.shape[1]}), got {decoder.shape[0]} rows"
        )
    reads = _unit_columns(encoder).T @ _unit_columns(w_in[layer])  # [feature, neuron]
    writes = _unit_columns(decoder.T).T @ _unit_columns(w_out[layer].T)
    return reads.max(dim=1).values, writes.abs().max(dim=1).values
