"""TransformerLens's hook names (``"blocks.0.attn.hook_z"``) read as ours (``("z", 0)``), for users coming from it.

Our activations carry TransformerLens's short names (``z``, ``resid_pre``,
``mlp_post`` …) and a separate layer index; TransformerLens spells the same
point ``blocks.{layer}.attn.hook_z``. :func:`parse_tl_name` translates one into
the other, so ``run_with_hooks`` can accept the long form (:func:`tl_key`), refuse
a ``fwd_hooks`` list with the equivalent call (:func:`fwd_hooks_message`), and the
causal sweeps can say "did you mean 'z'?" instead of listing every site. Our own
names, with a layer and without, are :data:`LAYER_NAMES` and :data:`GLOBAL_NAMES`.
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
    "mlp.hook_mid": "mlp_mid",
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

#: Activation names that carry a layer index (``cache[name, layer]``); the others have none.
LAYER_NAMES = frozenset(
    {
        "q", "k", "v", "z", "attn_scores", "pattern", "result", "scale", "scale_mlp", "attn_out", "mlp_out",
        "mlp_pre", "mlp_post", "resid_pre", "resid_mid", "resid_post", "per_layer_input", "per_layer_out",
        "scale_attn_post", "scale_mlp_post", "mlp_mid",
    }
)  # fmt: skip
#: Activation names without a layer.
GLOBAL_NAMES = frozenset({"embed", "pos_embed", "resid_final", "scale_final"})

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


def tl_key(key: object) -> object:
    """A hook key with TransformerLens's spelling read as ours: ``"blocks.0.attn.hook_z"`` → ``("z", 0)``,
    ``("hook_z", 0)`` → ``("z", 0)``; anything else unchanged (checked by the caller)."""
    if isinstance(key, str):
        parsed = parse_tl_name(key)
        if parsed is not None and (parsed[1] is not None or parsed[0] in GLOBAL_NAMES):
            return parsed
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and key[0] not in LAYER_NAMES:
        parsed = parse_tl_name(key[0])
        if parsed is not None and parsed[1] is None and parsed[0] not in GLOBAL_NAMES:
            return parsed[0], key[1]
    return key


def fwd_hooks_message(hooks: object) -> str:
    """Why a TransformerLens ``fwd_hooks`` list is refused, with the equivalent call spelled out."""
    pairs = list(hooks) if isinstance(hooks, (list, tuple)) else []
    entries = []
    for pair in pairs[:4]:
        name = pair[0] if isinstance(pair, tuple) and len(pair) == 2 else pair
        key = tl_key(name)
        fn = getattr(pair[1], "__name__", "fn") if isinstance(pair, tuple) and len(pair) == 2 else "fn"
        fn = fn if fn.isidentifier() else "fn"
        entries.append(f"{key!r}: lambda value: {fn}(value, None)")
    equivalent = "{" + ", ".join(entries or ["('z', 0): lambda value: fn(value, None)"]) + "}"
    return (
        f"hooks: expected a dict {{(name, layer): fn(value) -> value | None}}, got TransformerLens's fwd_hooks form "
        f"({type(hooks).__name__}); the equivalent call is model.run_with_hooks(tokens, {equivalent}) "
        "(our hooks take the value only, not (value, hook))"
    )


__all__ = [
    "GLOBAL_NAMES", "LAYER_NAMES", "TL_GLOBAL_HOOKS", "TL_LAYER_HOOKS", "did_you_mean", "fwd_hooks_message",
    "parse_tl_name", "tl_key",
]  # fmt: skip
