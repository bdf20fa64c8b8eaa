"""The engine: the mathematics of *A Mathematical Framework for Transformer Circuits*, exact and factored.

Every function takes a :class:`~circuitwidgets.CircuitModel` and follows the
definitions of DESIGN.md §3 (row vectors; ``W_QK = W_Q W_Kᵀ``, ``W_OV = W_V W_O``).
No ``[d_vocab, d_vocab]`` matrix is formed unless a slice is asked for:
token-space circuits are :class:`LowRankMatrix` objects.

Every head at once: :func:`OV` and :func:`QK` are ``[n_layers, n_heads]`` stacks
of factored matrices (:class:`LowRankStack`, TransformerLens's ``FactoredMatrix``
with leading dimensions), and ``model.W_E @ OV(model) @ model.W_U`` the stack of
full circuits, still factored; copying, composition and same-matching scores
are batched computations over such stacks, run where the weights live (CPU or
GPU), half-precision weights in float32 blocks. Public functions validate the
model once (:func:`~circuitwidgets._checks.check_model`); what they
compute inside does not check again.

Modules: :mod:`.lowrank` (one factored matrix), :mod:`.stack` (stacks of them),
:mod:`.ov_qk` (circuits), :mod:`.copying` (eigenvalue and other copying
summaries), :mod:`.matching` (same matching through K-composition),
:mod:`.composition` (Q/K/V composition), :mod:`.skip_trigrams`, :mod:`.paths`
(bigrams, path expansion, term importance). Three tilings, three names:
:mod:`.topk_tiles` and :mod:`.topk_methods` (top-k of a factored ``[V, V]``
matrix in row blocks), :mod:`.composition_tiles` (composition's Gram tiles).

What needs a forward pass lives in :mod:`circuitwidgets.activations` (head
detectors, value norms, value-weighted patterns, logit effects, long-context
attention); its public functions are re-exported here.
"""

from __future__ import annotations

from circuitwidgets._checks import MLPPathsExcludedWarning
from circuitwidgets.activations.detectors import KINDS as HEAD_KINDS
from circuitwidgets.activations.detectors import HeadKind, head_scores, repeated_random_tokens, target_mask
from circuitwidgets.activations.value_paths import logit_effects, value_norms, value_weighted
from circuitwidgets.circuits._records import RecordList
from circuitwidgets.circuits.composition import all_composition_scores, composition_baseline, composition_scores
from circuitwidgets.circuits.copying import copying_scores, eigen_score, eigenvalues, matrix_copying_score
from circuitwidgets.circuits.lowrank import LowRankMatrix, TopEntries, TopK
from circuitwidgets.circuits.matching import kcomp_eigenvalues, same_matching_scores
from circuitwidgets.circuits.ov_qk import (
    OV,
    QK,
    W_OV,
    W_QK,
    direct_path,
    full_ov,
    full_qk,
    full_qk_kcomp,
    positional_qk,
    rotates,
)
from circuitwidgets.circuits.paths import (
    Bigram,
    PathExpansion,
    TermImportanceResult,
    bigrams,
    path_expansion,
    term_importance,
)
from circuitwidgets.circuits.skip_trigrams import SkipTrigram, SourceProfile, TokenScore, skip_trigrams, source_profile
from circuitwidgets.circuits.stack import LowRankStack

__all__ = [
    "HEAD_KINDS",
    "OV",
    "QK",
    "W_OV",
    "W_QK",
    "Bigram",
    "HeadKind",
    "LowRankMatrix",
    "LowRankStack",
    "MLPPathsExcludedWarning",
    "PathExpansion",
    "RecordList",
    "SkipTrigram",
    "SourceProfile",
    "TermImportanceResult",
    "TokenScore",
    "TopEntries",
    "TopK",
    "all_composition_scores",
    "bigrams",
    "composition_baseline",
    "composition_scores",
    "copying_scores",
    "direct_path",
    "eigen_score",
    "eigenvalues",
    "full_ov",
    "full_qk",
    "full_qk_kcomp",
    "head_scores",
    "kcomp_eigenvalues",
    "logit_effects",
    "matrix_copying_score",
    "path_expansion",
    "positional_qk",
    "repeated_random_tokens",
    "rotates",
    "same_matching_scores",
    "skip_trigrams",
    "source_profile",
    "target_mask",
    "term_importance",
    "value_norms",
    "value_weighted",
]
