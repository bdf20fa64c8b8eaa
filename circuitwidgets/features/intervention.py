"""Interventions on transcoder features in the real model: set ``(layer, position, feature)`` to a value and rerun.

The meaning is circuit-tracer 0.5's ``feature_intervention`` (Ameisen et al., 2025), on our model:

- the model's own MLPs run, so what the transcoders miss (their error) stays in the output; an intervened
  feature adds ``(value − its activation in this run) · W_dec[feature]`` to its layer's MLP output, so setting a
  feature to its own value changes nothing;
- ``freeze_attention`` (the default) replays the clean run's attention patterns;
- ``constrained_layers`` also freezes those layers' MLP outputs at the clean run's (only the interventions'
  decoder writes are added there, measured against the clean activations) and, when it covers every layer, every
  norm's scale: the change that reaches the logits is then the intervened features' *direct* effect, which is
  what an attribution graph's edge is (DESIGN.md §3e).

Activations are each transcoder's ``encode`` of what it reads in the intervened run ``[n_layers, pos, d_sae]``
(an intervened feature shows what its input gives it; its value is what it writes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from circuitwidgets._checks import check_bool, check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.transcoders import TranscoderLike, check_transcoders, transcoder_input
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook

Hooks = dict[tuple[str, "int | None"], Hook]


@dataclass(frozen=True)
class Scale:
    """A value relative to the feature's clean activation: ``factor × activation`` (see :func:`times`)."""

    factor: float


def times(factor: float) -> Scale:
    """An intervention value meaning "``factor`` times the feature's clean activation" (``times(0)`` zeroes it,
    ``times(2)`` doubles it): use it as the value of an ``(layer, position, feature, value)`` tuple."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor):
        raise ArgumentError(f"factor: expected a finite number, got {factor!r}")
    return Scale(float(factor))


def group(nodes: Iterable[Sequence[int]], value: float | Scale) -> list[tuple[int, int, int, float | Scale]]:
    """One value for every ``(layer, position, feature)`` of a supernode: the interventions of the group."""
    return [(int(n[0]), int(n[1]), int(n[2]), value) for n in nodes]


@dataclass
class Intervened:
    """What :func:`intervene` returns: ``logits`` and ``clean_logits`` ``[pos, d_vocab]``, the transcoders'
    ``activations`` and ``clean_activations`` ``[n_layers, pos, d_sae]`` (per layer in ``layer_activations`` when
    the widths differ), and the checked ``interventions`` with absolute values. Tensors on the CPU
    (``numpy.asarray`` reads them)."""

    logits: torch.Tensor
    clean_logits: torch.Tensor
    layer_activations: list[torch.Tensor]
    clean_layer_activations: list[torch.Tensor]
    interventions: list[tuple[int, int, int, float]] = field(default_factory=list)
    layer_pre_activations: list[torch.Tensor] = field(default_factory=list)
    clean_layer_pre_activations: list[torch.Tensor] = field(default_factory=list)

    @property
    def activations(self) -> torch.Tensor:
        """``[n_layers, pos, d_sae]`` after the change."""
        return torch.stack(self.layer_activations)

    @property
    def clean_activations(self) -> torch.Tensor:
        """``[n_layers, pos, d_sae]`` of the clean run."""
        return torch.stack(self.clean_layer_activations)

    @property
    def pre_activations(self) -> torch.Tensor:
        """``[n_layers, pos, d_sae]``: ``x W_enc + b_enc`` after the change (what an attribution graph's feature
        targets are, less the bias; circuit-tracer's ``apply_activation_function=False``)."""
        return torch.stack(self.layer_pre_activations)

    @property
    def clean_pre_activations(self) -> torch.Tensor:
        """``[n_layers, pos, d_sae]``: ``x W_enc + b_enc`` of the clean run."""
        return torch.stack(self.clean_layer_pre_activations)

    def logit_change(self, token: int, position: int = -1) -> float:
        """``logits − clean_logits`` of ``token`` at ``position`` (default the last)."""
        return float(self.logits[position, token] - self.clean_logits[position, token])


def check_value(where: str, value: object) -> float | Scale:
    """A finite number or a :class:`Scale` (typed error naming ``where``)."""
    if isinstance(value, Scale):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{where}: expected a number or features.times(s), got {type(value).__name__}")
    if not math.isfinite(value):
        raise ArgumentError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def check_interventions(
    interventions: object, n_layers: int, n_pos: int, widths: Sequence[int]
) -> list[tuple[int, int, int, float | Scale]]:
    """Each ``(layer, position, feature, value)`` checked against the model, the prompt and the transcoders
    (negative positions count from the end)."""
    if isinstance(interventions, (str, bytes, Mapping)) or not isinstance(interventions, Iterable):
        raise ArgumentTypeError(
            f"interventions: expected a list of (layer, position, feature, value), got {type(interventions).__name__}"
        )
    out = []
    for i, item in enumerate(interventions):
        where = f"interventions[{i}]"
        if not isinstance(item, (tuple, list)) or len(item) != 4:
            raise ArgumentTypeError(f"{where}: expected (layer, position, feature, value), got {item!r}")
        layer = check_int(f"{where} layer", item[0], 0, n_layers)
        pos = check_int(f"{where} position", item[1], -n_pos, n_pos) % n_pos
        feature = check_int(f"{where} feature", item[2], 0, widths[layer])
        out.append((layer, pos, feature, check_value(f"{where} value", item[3])))
    return out


def check_same_model(model: CircuitModel, transcoders: Sequence[TranscoderLike]) -> None:
    """Refuse transcoders that say they were trained on another model (their ``model_name``, when they carry one)."""
    for tc in transcoders:
        name = getattr(tc, "model_name", None)
        if isinstance(name, str) and name and name != model.name:
            raise ArgumentError(
                f"transcoders: expected transcoders of model {model.name!r}, got layer {tc.layer}'s of {name!r}"
            )


class _Run:
    """The hooks of one intervened run: what each transcoder reads, its activations, the MLP outputs changed."""

    def __init__(
        self, model: CircuitModel, tcs: Sequence[TranscoderLike], by_layer: dict[int, list[tuple[int, int, float]]],
        clean: _Clean, constrained: set[int],
    ) -> None:  # fmt: skip
        self.model, self.tcs, self.by_layer, self.clean, self.constrained = model, tcs, by_layer, clean, constrained
        self.resid: dict[int, torch.Tensor] = {}
        self.scale: dict[int, torch.Tensor] = {}
        self.acts: list[torch.Tensor] = [torch.empty(0)] * len(tcs)
        self.pre: list[torch.Tensor] = [torch.empty(0)] * len(tcs)

    def hooks(self) -> Hooks:
        hooks: Hooks = {}
        for layer in range(len(self.tcs)):
            hooks[("resid_mid", layer)] = _keep(self.resid, layer)
            hooks[("scale_mlp", layer)] = self._scale_hook(layer)
            hooks[("mlp_out", layer)] = self._out_hook(layer)
        if self.frozen_norms:
            for name in ("scale", "scale_final", "scale_attn_post"):
                for where in [None] if name == "scale_final" else range(len(self.tcs)):
                    frozen = self.clean.cache.get((name, where))
                    if frozen is not None:
                        hooks[(name, where)] = _replay(frozen)
        return hooks

    @property
    def frozen_norms(self) -> bool:
        """Every layer constrained: the norms' scales are the clean run's too (circuit-tracer's direct effects)."""
        return len(self.constrained) == len(self.tcs)

    def _scale_hook(self, layer: int) -> Hook:
        frozen = self.frozen_norms

        def hook(value: torch.Tensor) -> torch.Tensor | None:
            if frozen:
                value = self.clean.cache["scale_mlp", layer].to(value.dtype)
            self.scale[layer] = value
            return value if frozen else None

        return hook

    def _out_hook(self, layer: int) -> Hook:
        tc = self.tcs[layer]

        def hook(out: torch.Tensor) -> torch.Tensor:
            x = transcoder_input(self.model.cfg, tc.in_site, self.resid[layer], self.scale[layer])[0].to(tc.W_enc.dtype)
            acts = tc.encode(x)
            self.acts[layer] = acts.detach()
            self.pre[layer] = _pre_activations(tc, x)
            if layer in self.constrained:
                base = self.clean.acts[layer]
                out = self.clean.cache["mlp_out", layer].clone()
                if tc.W_skip is not None:  # the skip path follows the stream (circuit-tracer's constrained skip)
                    out[0] += ((x - self.clean.inputs[layer]) @ tc.W_skip.to(x.dtype)).to(out.dtype)
            else:
                base = acts
            wanted = self.by_layer.get(layer)
            if not wanted:
                return out
            delta = torch.zeros_like(base)
            for pos, feature, value in wanted:
                delta[pos, feature] = value - base[pos, feature]
            write = delta @ tc.W_dec.to(delta.dtype)
            out = out.clone()
            out[0] += write.to(out.dtype)[-out.shape[1] :]
            return out

        return hook


def _keep(store: dict[int, torch.Tensor], layer: int) -> Hook:
    def hook(value: torch.Tensor) -> None:
        store[layer] = value

    return hook


def _replay(frozen: torch.Tensor) -> Hook:
    def hook(value: torch.Tensor) -> torch.Tensor:
        return frozen.to(value.dtype)

    return hook


def _pre_activations(tc: TranscoderLike, x: torch.Tensor) -> torch.Tensor:
    return (x @ tc.W_enc.to(x.dtype) + tc.b_enc.to(x.dtype)).detach()


@dataclass
class _Clean:
    logits: torch.Tensor
    cache: ActivationCache
    acts: list[torch.Tensor]
    inputs: list[torch.Tensor]
    pre: list[torch.Tensor]


_CLEAN_NAMES = ["pattern", "scale", "scale_mlp", "scale_final", "scale_attn_post", "resid_mid", "mlp_out"]


def _clean_run(model: CircuitModel, tcs: Sequence[TranscoderLike], t: torch.Tensor) -> _Clean:
    names = [n for n in _CLEAN_NAMES if n != "scale_attn_post" or model.weight("post_attn_norm") is not None]
    logits, cache = model.run_with_cache(t, names=names)
    acts, inputs = [], []
    with torch.no_grad():
        for layer, tc in enumerate(tcs):
            x = transcoder_input(model.cfg, tc.in_site, cache["resid_mid", layer], cache["scale_mlp", layer])[0]
            x = x.to(tc.W_enc.dtype)
            inputs.append(x)
            acts.append(tc.encode(x).detach())
    return _Clean(logits[0], cache, acts, inputs, [_pre_activations(tc, x) for tc, x in zip(tcs, inputs, strict=True)])


def _resolve(checked: list[tuple[int, int, int, float | Scale]], clean: _Clean) -> list[tuple[int, int, int, float]]:
    return [
        (lyr, p, f, v.factor * float(clean.acts[lyr][p, f]) if isinstance(v, Scale) else v) for lyr, p, f, v in checked
    ]


def check_constrained(constrained_layers: object, n_layers: int) -> set[int]:
    """The layers whose MLP outputs are frozen (``None``: none), checked."""
    if constrained_layers is None:
        return set()
    if isinstance(constrained_layers, (str, bytes)) or not isinstance(constrained_layers, Iterable):
        raise ArgumentTypeError(
            f"constrained_layers: expected a range or list of layers (or None), got {type(constrained_layers).__name__}"
        )
    return {check_int("constrained_layers", layer, 0, n_layers) for layer in constrained_layers}


@torch.no_grad()
def intervene(
    model: CircuitModel,
    transcoders: object,
    tokens: torch.Tensor | Sequence[int] | str,
    interventions: object,
    *,
    freeze_attention: bool = True,
    constrained_layers: Iterable[int] | None = None,
) -> Intervened:
    """Run ``tokens`` with transcoder features set to values (circuit-tracer 0.5's ``feature_intervention``).

    Parameters
    ----------
    model, transcoders
        The model and one transcoder per layer (as :func:`circuitwidgets.graphs.attribution_graph` takes them).
    tokens
        One prompt: ``[pos]`` or ``[1, pos]`` ids, or a text.
    interventions
        ``(layer, position, feature, value)`` tuples: ``value`` the feature's new activation (absolute), or
        :func:`times` ``(s)`` for ``s`` times its clean activation; :func:`group` sets a whole supernode.
    freeze_attention
        Replay the clean run's attention patterns (circuit-tracer's default).
    constrained_layers
        Layers whose MLP outputs stay at the clean run's but for the interventions' writes; every layer (with
        ``freeze_attention``) also freezes the norms, so the logits change by the direct effect alone.

    Returns
    -------
    Intervened
        ``.logits``, ``.clean_logits`` ``[pos, d_vocab]``, ``.activations`` ``[n_layers, pos, d_sae]``.
    """
    tcs = check_transcoders(model, transcoders)
    check_same_model(model, tcs)
    check_bool("freeze_attention", freeze_attention)
    constrained = check_constrained(constrained_layers, model.cfg.n_layers)
    t = model._check_tokens(tokens)
    if t.shape[0] != 1:
        raise ArgumentError(f"tokens: expected one prompt ([pos] or [1, pos]), got {t.shape[0]} prompts")
    widths = [int(tc.W_dec.shape[0]) for tc in tcs]
    checked = check_interventions(interventions, model.cfg.n_layers, t.shape[1], widths)
    clean = _clean_run(model, tcs, t)
    values = _resolve(checked, clean)
    by_layer: dict[int, list[tuple[int, int, float]]] = {}
    for layer, pos, feature, value in values:
        by_layer.setdefault(layer, []).append((pos, feature, value))
    run = _Run(model, tcs, by_layer, clean, constrained)
    # circuit-tracer freezes the patterns whenever layers are constrained, whatever freeze_attention says
    frozen = freeze_attention or bool(constrained)
    patterns = [clean.cache["pattern", layer] for layer in range(model.cfg.n_layers)] if frozen else None
    logits, _ = model.run_with_cache(t, patterns=patterns, hooks=run.hooks(), cache=False)
    return Intervened(
        logits[0].detach().cpu(), clean.logits.detach().cpu(), [a.cpu() for a in run.acts],
        [a.cpu() for a in clean.acts], values, [p.cpu() for p in run.pre], [p.cpu() for p in clean.pre],
    )  # fmt: skip
