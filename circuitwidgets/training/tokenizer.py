"""Byte-level BPE tokenizer trained on the corpus with ``tokenizers``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS_TOKEN = "<|BOS|>"


def train_bpe(texts: Iterable[str], vocab_size: int = 4096) -> Tokenizer:
    """Train a byte-level BPE tokenizer whose id 0 is the beginning-of-sequence token.

    Byte level means every string is encodable: no unknown token exists.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def encode_corpus(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """Token ids of all texts, each file preceded by BOS, as one ``uint16`` array."""
    bos = tokenizer.token_to_id(BOS_TOKEN)
    pieces: list[np.ndarray] = []
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        pieces.append(np.asarray([bos, *encoding.ids], dtype=np.uint16))
    return np.concatenate(pieces)
