"""TransformerLens's hook names (``"blocks.0.attn.hook_z"``) read as ours (``("z", 0)``), for users coming from it.

Our activations carry TransformerLens's short names (``z``, ``resid_pre``,
``mlp_post`` …) and a separate layer index; TransformerLens spells the same
point ``blocks.{layer}.attn.hook_z``. :func:`parse_tl_name` translates one into
the other, so ``run_with_hooks`` can accept the long form and the causal
sweeps can say "did you mean 'z'?" instead of listing every site.
"""

from __future__ import annotations

import re

#: TransformerLens's hook (after ``blocks.{layer}.``) → our activation name.
TL_LAYER_HOOKS: dict[str, str] = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_q": "q",
    "attn.hook_k": "k",
    "attn.hook_v": "v",
    "attn.hook_z": "z",
    "attn.hook_result": "result",
    "attn.hook_pattern": "pattern",
    "attn.hook_attn_scores": "attn_scores",
    "mlp.hook_pre": "mlp_pre",
    "mlp.hook_post": "mlp_post",
    "ln1.hook_scale": "scale",
    "ln2.hook_scale": "scale_mlp",
    "ln1_post.hook_scale": "scale_attn_post",
    "ln2_post.hook_scale": "scale_mlp_post",
}
#: TransformerLens's hooks without a layer → ours.
TL_GLOBAL_HOOKS: dict[str, str] = {
    "hook_embed": "embed",
    "hook_pos_embed": "pos_embed",
    "ln_final.hook_scale": "scale_final",
}

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def parse_tl_name(name: str) -> tuple[str, int | None] | None:
    """``(our name, layer)`` of a TransformerLens hook name, or ``None`` when ``name`` is not one.

    ``"blocks.3.attn.hook_z"`` → ``("z", 3)``; ``"hook_embed"`` → ``("embed", None)``;
    a layerless spelling of a per-layer hook (``"hook_z"``, ``"attn.hook_z"``, what
    ``utils.get_act_name("z")`` gives) → ``("z", None)``.
    """
    if name in TL_GLOBAL_HOOKS:
        return TL_GLOBAL_HOOKS[name], None
    match = _BLOCK.match(name)
    if match is not None:
        ours = TL_LAYER_HOOKS.get(match.group(2))
        return (ours, int(match.group(1))) if ours is not None else None
    for tl, ours in TL_LAYER_HOOKS.items():
        if name in (tl, tl.split(".")[-1]):
            return ours, None
    return None


def did_you_mean(name: object) -> str:
    """`` did you mean 'z'?``-style hint for a TransformerLens hook name (empty for anything else)."""
    if not isinstance(name, str):
        return ""
    parsed = parse_tl_name(name)
    if parsed is None:
        return ""
    ours, layer = parsed
    at = f" at layer {layer}" if layer is not None else ""
    return f" ({name!r} is TransformerLens's name of our {ours!r}{at}: did you mean {ours!r}?)"


__all__ = ["TL_GLOBAL_HOOKS", "TL_LAYER_HOOKS", "did_you_mean", "parse_tl_name"]
