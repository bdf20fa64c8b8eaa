"""One tokenizer interface over ``tokenizers``, Hugging Face and bare vocabularies.

The model needs three things from a tokenizer: ids for a text, a display string
for one id, and the beginning-of-sequence id. Display strings are untrusted
text (real vocabularies contain ``<script>`` and ``&nbsp``); the views render
them as text, never as markup. How a token's bytes become its display string
(byte-level and SentencePiece pieces, byte code points for bytes that are not
UTF-8) is :mod:`circuitwidgets.token_display`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from circuitwidgets._text import BYTE_BASE, is_byte_code_point
from circuitwidgets.token_display import (
    BYTE_FALLBACK,
    PieceDisplay,
    PieceScheme,
    display_bytes,
    display_text,
    gpt2_byte_decoder,
    piece_scheme,
    token_bytes,
)

__all__ = [
    "BYTE_BASE",
    "FastTokenizer",
    "HFTokenizer",
    "PieceScheme",
    "TokenizerLike",
    "VocabTokenizer",
    "display_bytes",
    "display_text",
    "gpt2_byte_decoder",
    "is_byte_code_point",
    "piece_scheme",
    "token_bytes",
]


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
        """Display string of one token id (its bytes: text, with byte code points for partial UTF-8)."""
        ...


class FastTokenizer:
    """Adapter over a ``tokenizers.Tokenizer`` (the shipped models' tokenizer)."""

    def __init__(self, tokenizer: Any, bos_token: str | None = "<|BOS|>") -> None:
        self.tokenizer = tokenizer
        self._bos = tokenizer.token_to_id(bos_token) if bos_token is not None else None
        self._display = PieceDisplay(tokenizer)
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
        """Display string of one token: its bytes (module docstring); ``<id>`` for an id the tokenizer does not have."""
        shown = self._cache.get(token_id)
        if shown is None:
            if not 0 <= token_id < self.vocab_size:
                return _unknown(token_id)
            shown = self._cache[token_id] = self._display(token_id)
        return shown

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json``."""
        self.tokenizer.save(str(path))


class HFTokenizer:
    """Adapter over a Hugging Face ``PreTrainedTokenizer(Fast)`` already in memory."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._display = PieceDisplay(backend) if backend is not None else None

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
        """Display string of one token: its bytes (module docstring); ``<id>`` for an id the tokenizer does not have.

        Fast tokenizers are read through their ``tokenizers`` backend; a slow one
        with a byte-level table (``byte_decoder``) or a SentencePiece model
        (``sp_model``) through its pieces; any other through ``decode``.
        """
        shown = self._cache.get(token_id)
        if shown is None:
            if not 0 <= token_id < self.vocab_size:
                return _unknown(token_id)
            display = self._display
            shown = display(token_id) if display is not None and token_id < display.size else self._slow(token_id)
            self._cache[token_id] = shown
        return shown

    def _slow(self, token_id: int) -> str:
        """Display string from a tokenizer without a ``tokenizers`` backend (pieces when readable, else ``decode``)."""
        added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
        if token_id not in added:
            piece = self.tokenizer.convert_ids_to_tokens(token_id)
            data = _slow_piece_bytes(self.tokenizer, token_id, piece) if isinstance(piece, str) else None
            if data is not None:
                return display_bytes(data)
        return display_text(self.tokenizer.decode([token_id], clean_up_tokenization_spaces=False))


def _slow_piece_bytes(tokenizer: Any, token_id: int, piece: str) -> bytes | None:
    """Bytes of a slow Hugging Face tokenizer's piece: through its byte-level table (``byte_decoder``, GPT-2) or
    its SentencePiece model (``sp_model``: ``▁`` is a space, byte pieces are bytes); ``None`` for any other."""
    byte_decoder = getattr(tokenizer, "byte_decoder", None)
    if isinstance(byte_decoder, dict):
        return bytes(byte_decoder[ch] for ch in piece) if all(ch in byte_decoder for ch in piece) else None
    sp = getattr(tokenizer, "sp_model", None)
    if sp is None or not callable(getattr(sp, "IsByte", None)) or not token_id < int(sp.GetPieceSize()):
        return None
    match = BYTE_FALLBACK.fullmatch(piece)
    if match is not None and sp.IsByte(token_id):
        return bytes([int(match.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


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
