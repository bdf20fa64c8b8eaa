"""The one-layer transformer of Nanda et al. for modular addition, as plain tensors.

Inputs are the three tokens ``a b =`` (``=`` is token ``p``), the answer
``(a + b) mod p`` is read at the last position. The architecture is the
paper's: learned positions added to the residual stream, one attention layer
(no biases), a ReLU MLP, no LayerNorm, an unembedding onto the ``p`` answers.

Weights are a ``dict`` of leaf tensors in the row-vector convention of
:class:`circuitwidgets.CircuitModel` (``W_E [p + 1, d_model]``,
``W_Q/K/V [n_heads, d_model, d_head]``, ``W_O [n_heads, d_head, d_model]``,
``W_in [d_model, d_mlp]``, ``W_U [d_model, p]``), so the progress measures read
them directly.

Why :func:`forward` is fast: the loss reads only the last position, whose
stream before attention is the same for every pair (``W_E[=] + W_pos[2]``).
Its query is one vector per head, and the keys and values of positions 0 and
1 depend on one token each, so they are tables of ``p`` rows gathered per
pair. Only the attention mixture, the MLP and the unembedding run per pair,
and only at the last position: the same mathematics as the full three-position
forward (:func:`forward_full`, the definition the tests compare against).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError

#: The name every grokking checkpoint carries, so a checkpoint of another task is refused.
TASK = "modular_addition"
Weights = dict[str, torch.Tensor]


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name}: expected an int >= {low}, got {type(value).__name__} {value!r}")
    if value < low:
        raise ArgumentError(f"{name}: expected an int >= {low}, got {value}")
    return value


def _check_float(name: str, value: object, low: float, high: float | None, open_low: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    v = float(value)
    below = v <= low if open_low else v < low
    if not math.isfinite(v) or below or (high is not None and v >= high):
        span = f"in ({low}, {high})" if high is not None else (f"> {low}" if open_low else f">= {low}")
        raise ArgumentError(f"{name}: expected a number {span}, got {value!r}")
    return v


@dataclass(frozen=True)
class GrokConfig:
    """The task and the recipe (defaults: Nanda et al., p = 113, 30 % of pairs for training).

    Parameters
    ----------
    p : int
        The modulus (a prime gives the clean Fourier picture; any int >= 3 is accepted).
    fraction : float
        Fraction of the ``p * p`` pairs used for training, in (0, 1).
    d_model, n_heads, d_head, d_mlp : int
        The transformer's widths.
    lr, weight_decay, beta1, beta2 : float
        AdamW's settings (full batch, constant learning rate).
    seed : int
        Seeds the initialisation and the train/test split.
    """

    p: int = 113
    fraction: float = 0.3
    d_model: int = 128
    n_heads: int = 4
    d_head: int = 32
    d_mlp: int = 512
    lr: float = 1e-3
    weight_decay: float = 1.0
    beta1: float = 0.9
    beta2: float = 0.98
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("p", self.p, 3)
        _check_float("fraction", self.fraction, 0.0, 1.0, open_low=True)
        for name in ("d_model", "n_heads", "d_head", "d_mlp"):
            _check_int(name, getattr(self, name), 1)
        _check_int("seed", self.seed, 0)
        _check_float("lr", self.lr, 0.0, None, open_low=True)
        _check_float("weight_decay", self.weight_decay, 0.0, None, open_low=False)
        _check_float("beta1", self.beta1, 0.0, 1.0, open_low=False)
        _check_float("beta2", self.beta2, 0.0, 1.0, open_low=False)

    def to_dict(self) -> dict[str, object]:
        """The fields as JSON-ready values (with the task's name)."""
        return {"task": TASK, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, object], source: str = "config") -> GrokConfig:
        """The config saved by :meth:`to_dict`; a record of another task is refused."""
        task = data.get("task")
        if task != TASK:
            raise ArgumentError(f"{source}: expected a checkpoint of task {TASK!r}, got task {task!r}")
        fields = {k: v for k, v in data.items() if k != "task"}
        return cls(**fields)  # type: ignore[arg-type]


def init_weights(cfg: GrokConfig, dtype: torch.dtype = torch.float32) -> Weights:
    """Weights drawn as Nanda et al. draw them (normal, std ``1/sqrt(d_model)``; ``W_U``: ``1/sqrt(p + 1)``)."""
    g = torch.Generator().manual_seed(cfg.seed)
    d, H, dh, m, p = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.p

    def normal(*shape: int, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    s = 1.0 / math.sqrt(d)
    return {
        "W_E": normal(p + 1, d, std=s),
        "W_pos": normal(3, d, std=s),
        "W_Q": normal(H, d, dh, std=s),
        "W_K": normal(H, d, dh, std=s),
        "W_V": normal(H, d, dh, std=s),
        "W_O": normal(H, dh, d, std=s),
        "W_in": normal(d, m, std=s),
        "b_in": torch.zeros(m, dtype=dtype),
        "W_out": normal(m, d, std=s),
        "b_out": torch.zeros(d, dtype=dtype),
        "W_U": normal(d, p, std=1.0 / math.sqrt(p + 1)),
    }


def _stream_and_neurons(w: Weights, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The last position's stream after attention ``[n, d_model]`` and the MLP's ReLU output ``[n, d_mlp]``.

    The fast path (module docstring): the key and value of every (position, token) are computed once, in a table
    of ``2p + 1`` rows, and gathered per pair; the MLP and the unembedding run only at the last position. Few,
    large operations: at this size the cost of a step is mostly the number of operations, not their flops.
    """
    p = w["W_U"].shape[1]
    H, d, dh = w["W_Q"].shape
    eq = w["W_E"][p] + w["W_pos"][2]  # [d]: the last position's stream before attention
    toks = w["W_E"][:p]
    stream = torch.cat([toks + w["W_pos"][0], toks + w["W_pos"][1], eq[None]])  # [2p + 1, d]: (position, token) rows
    q = (eq @ w["W_Q"].transpose(0, 1).reshape(d, H * dh)).view(H, dh)
    k = (stream @ w["W_K"].transpose(0, 1).reshape(d, H * dh)).view(-1, H, dh)
    v = stream @ w["W_V"].transpose(0, 1).reshape(d, H * dh)  # [2p + 1, H * dh]
    scores = (k * q).sum(dim=-1) / math.sqrt(dh)  # [2p + 1, H]
    rows = torch.stack([a, b + p, torch.full_like(a, 2 * p)], dim=1)  # [n, 3]: each pair's three table rows
    pattern = scores[rows].softmax(dim=1)  # [n, 3, H]
    z = (pattern.unsqueeze(-1) * v[rows].view(-1, 3, H, dh)).sum(dim=1)  # [n, H, dh]
    resid = eq + z.reshape(-1, H * dh) @ w["W_O"].reshape(H * dh, d)
    return resid, torch.relu(torch.addmm(w["b_in"], resid, w["W_in"]))


def forward_parts(w: Weights, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(neurons [n, d_mlp], logits [n, p])`` of one pass (what the progress measures read)."""
    resid, neurons = _stream_and_neurons(w, a, b)
    return neurons, (resid + torch.addmm(w["b_out"], neurons, w["W_out"])) @ w["W_U"]


def forward(w: Weights, a: torch.Tensor, b: torch.Tensor, return_neurons: bool = False) -> torch.Tensor:
    """Logits ``[n, p]`` at the last position for the pairs ``(a, b)`` (or the MLP's ReLU output ``[n, d_mlp]``);
    the fast path described in the module docstring."""
    neurons, logits = forward_parts(w, a, b)
    return neurons if return_neurons else logits


def forward_full(w: Weights, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The definition: all three positions, causal attention, MLP and unembedding everywhere; logits ``[n, 3, p]``."""
    p = w["W_U"].shape[1]
    dh = w["W_Q"].shape[2]
    tokens = torch.stack([a, b, torch.full_like(a, p)], dim=1)  # [n, 3]
    x = w["W_E"][tokens] + w["W_pos"]
    q = torch.einsum("npd,hde->nhpe", x, w["W_Q"])
    k = torch.einsum("npd,hde->nhpe", x, w["W_K"])
    v = torch.einsum("npd,hde->nhpe", x, w["W_V"])
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    mask = torch.ones(3, 3, dtype=torch.bool).tril()
    pattern = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    x = x + torch.einsum("nhpe,hed->npd", pattern @ v, w["W_O"])
    x = x + torch.relu(x @ w["W_in"] + w["b_in"]) @ w["W_out"] + w["b_out"]
    return x @ w["W_U"]


def loss_and_accuracy(logits: torch.Tensor, answers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy (computed in float64, as the paper does, so tiny losses are not rounded to 0) and accuracy."""
    loss = torch.nn.functional.cross_entropy(logits.double(), answers)
    return loss, accuracy(logits, answers)


def accuracy(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """Fraction of pairs whose largest logit is the answer."""
    return (logits.argmax(dim=-1) == answers).double().mean()


def pairs(p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All ``p * p`` pairs ``(a, b)``, ``a`` major: pair ``i`` is ``(i // p, i % p)``."""
    grid = torch.arange(p * p)
    return grid // p, grid % p


def split(cfg: GrokConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the training and test pairs: a permutation seeded by ``cfg.seed``, the first ``fraction`` trains."""
    g = torch.Generator().manual_seed(cfg.seed + 1_000_003)
    perm = torch.randperm(cfg.p * cfg.p, generator=g)
    n_train = max(1, min(cfg.p * cfg.p - 1, round(cfg.fraction * cfg.p * cfg.p)))
    return perm[:n_train].sort().values, perm[n_train:].sort().values
