"""One tokenizer interface over ``tokenizers``, Hugging Face and bare vocabularies.

The model needs three things from a tokenizer: ids for a text, a display string
for one id, and the beginning-of-sequence id. Display strings are untrusted
text (real vocabularies contain ``<script>`` and ``&nbsp``); the views render
them as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


def _unknown(token_id: int) -> str:
    """Display string of an id a tokenizer does not have (a model's vocabulary may be padded past it)."""
    return f"<{token_id}>"


@runtime_checkable
class TokenizerLike(Protocol):
    """What :class:`circuitwidgets.CircuitModel` needs of a tokenizer."""

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        ...

    @property
    def bos_token_id(self) -> int | None:
        """Id prepended by ``to_tokens(prepend_bos=True)``, or ``None``."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...

    def token_str(self, token_id: int) -> str:
        """Display string of one token id (decoded bytes; may be partial UTF-8)."""
        ...


class FastTokenizer:
    """Adapter over a ``tokenizers.Tokenizer`` (the shipped models' tokenizer)."""

    def __init__(self, tokenizer: Any, bos_token: str | None = "<|BOS|>") -> None:
        self.tokenizer = tokenizer
        self._bos = tokenizer.token_to_id(bos_token) if bos_token is not None else None
        self._cache: dict[int, str] = {}

    @classmethod
    def from_file(cls, path: str | Path, bos_token: str | None = "<|BOS|>") -> FastTokenizer:
        """Load a ``tokenizer.json`` file."""
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)), bos_token=bos_token)

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return int(self.tokenizer.get_vocab_size())

    @property
    def bos_token_id(self) -> int | None:
        """Id of the beginning-of-sequence token."""
        return self._bos

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def token_str(self, token_id: int) -> str:
        """Display string of one token (``<id>`` for an id the tokenizer does not have, e.g. vocabulary padding)."""
        if token_id not in self._cache:
            if not 0 <= token_id < self.vocab_size:
                return _unknown(token_id)
            self._cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return self._cache[token_id]

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json``."""
        self.tokenizer.save(str(path))


class HFTokenizer:
    """Adapter over a Hugging Face ``PreTrainedTokenizer(Fast)`` already in memory."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    @property
    def vocab_size(self) -> int:
        """Number of token ids (including added tokens)."""
        return len(self.tokenizer)

    @property
    def bos_token_id(self) -> int | None:
        """The tokenizer's BOS id (GPT-2: ``<|endoftext|>``)."""
        bos = self.tokenizer.bos_token_id
        return None if bos is None else int(bos)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def token_str(self, token_id: int) -> str:
        """Display string of one token (``<id>`` for an id the tokenizer does not have, e.g. vocabulary padding)."""
        if token_id not in self._cache:
            if not 0 <= token_id < self.vocab_size:
                return _unknown(token_id)
            self._cache[token_id] = self.tokenizer.decode([token_id])
        return self._cache[token_id]


class VocabTokenizer:
    """A tokenizer from an explicit list of token strings (no text encoding).

    Used for models that come without a tokenizer: ids display as their
    strings, and ``encode`` splits on whitespace and looks words up.
    """

    def __init__(self, vocab: Sequence[str], bos_token_id: int | None = None) -> None:
        self.vocab = list(vocab)
        self._index = {s: i for i, s in enumerate(self.vocab)}
        self._bos = bos_token_id

    @classmethod
    def numbered(cls, vocab_size: int) -> VocabTokenizer:
        """Tokens named ``<0>``, ``<1>``, ... for a model with no tokenizer."""
        return cls([f"<{i}>" for i in range(vocab_size)])

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.vocab)

    @property
    def bos_token_id(self) -> int | None:
        """Configured BOS id or ``None``."""
        return self._bos

    def encode(self, text: str) -> list[int]:
        """Look up whitespace-separated words; unknown words raise ``KeyError``."""
        from circuitwidgets.errors import ArgumentError

        ids = []
        for word in text.split():
            if word not in self._index:
                raise ArgumentError(f"text: word {word!r} is not in this model's vocabulary (it has no text tokenizer)")
            ids.append(self._index[word])
        return ids

    def token_str(self, token_id: int) -> str:
        """The vocabulary string of ``token_id`` (``<id>`` beyond the list, e.g. vocabulary padding)."""
        if not 0 <= token_id < len(self.vocab):
            return _unknown(token_id)
        return self.vocab[token_id]
