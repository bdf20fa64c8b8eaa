"""``DenseAttribution``: an attribution graph's full adjacency matrix, in circuit-tracer's node order.

Nodes in order: the selected active features (sorted by layer, position,
feature), the error nodes (layer-major: layer 0 position 0, 1, …), the token
embeddings, the chosen logits. ``adjacency[t, s]`` is the direct effect of node
``s`` on node ``t`` in the local replacement model (rows: targets; only feature
and logit rows can be non-zero).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class DenseAttribution:
    """The unpruned graph: adjacency ``[n, n]`` (float32, CPU) and what each node is.

    ``features`` ``[n_features, 3]`` (layer, pos, feature) and ``activations``
    ``[n_features]`` of the selected features; ``tokens`` the prompt's ids and
    ``prompt`` their strings; ``logit_tokens`` / ``logit_probabilities`` the chosen
    logits; ``n_active`` how many features were active before selection;
    ``extra``: JSON-able details (model name, timings).
    """

    adjacency: torch.Tensor
    features: torch.Tensor
    activations: torch.Tensor
    n_layers: int
    tokens: list[int]
    prompt: list[str]
    logit_tokens: torch.Tensor
    logit_probabilities: torch.Tensor
    n_active: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_pos(self) -> int:
        """Positions of the prompt."""
        return len(self.tokens)

    @property
    def n_features(self) -> int:
        """Selected feature nodes."""
        return int(self.features.shape[0])

    @property
    def n_logits(self) -> int:
        """Logit nodes."""
        return int(self.logit_tokens.shape[0])

    @property
    def error_start(self) -> int:
        """Row of the first error node."""
        return self.n_features

    @property
    def token_start(self) -> int:
        """Row of the first token-embedding node."""
        return self.n_features + self.n_layers * self.n_pos

    @property
    def logit_start(self) -> int:
        """Row of the first logit node."""
        return self.token_start + self.n_pos

    def logit_weights(self) -> torch.Tensor:
        """``[n]``: each logit node's probability, zero elsewhere (where influence starts)."""
        weights = torch.zeros(self.adjacency.shape[0], dtype=self.adjacency.dtype)
        weights[self.logit_start :] = self.logit_probabilities.to(weights.dtype)
        return weights
