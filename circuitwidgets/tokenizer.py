"""One tokenizer interface over ``tokenizers``, Hugging Face and bare vocabularies.

The model needs three things from a tokenizer: ids for a text, a display string
for one id, and the beginning-of-sequence id. Display strings are untrusted
text (real vocabularies contain ``<script>`` and ``&nbsp``); the views render
them as text, never as markup.

Display strings are the token's *bytes*, not ``decode([id])``: a byte-level
BPE token that is the first two bytes of "€" decodes to a bare ``�``, and a
SentencePiece tokenizer's decoder strips the leading space of ``▁the``. So
``token_str`` reads the vocabulary entry and the tokenizer's decoder:
byte-level pieces (GPT-2, Llama 3, Qwen, OLMo, SmolLM) map back through the
GPT-2 byte table; SentencePiece pieces (Llama 2, Gemma, Mistral, Phi-3) have
``▁`` turned into a space and ``<0xNN>`` byte-fallback tokens into byte NN.
The bytes are then shown as UTF-8 text, and each byte that is not part of a
valid UTF-8 character becomes a *byte code point* ``chr(BYTE_BASE + b)``
(U+EF80–U+EFFF, Private Use Area, after the OPTU-8 convention), which the views
show as ``\\xNN``. Private Use rather than Python's surrogate escapes
(U+DC80–U+DCFF): a lone surrogate cannot be written as UTF-8, and Jupyter's
message packer (``errors="surrogateescape"``) would turn it back into the raw,
invalid byte on the wire. A real character in U+EF80–U+EFFF is itself shown as
its three UTF-8 bytes, so a display string always spells the token's bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from circuitwidgets._text import BYTE_BASE, is_byte_code_point

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

_SURROGATE_ESCAPE = 0xDC00  # Python's ``errors="surrogateescape"`` puts byte b at U+DC00 + b
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_RESERVED = re.compile(f"[{chr(BYTE_BASE + 0x80)}-{chr(BYTE_BASE + 0xFF)}]")


def _unknown(token_id: int) -> str:
    """Display string of an id a tokenizer does not have (a model's vocabulary may be padded past it)."""
    return f"<{token_id}>"


def _as_byte_code_points(ch: str) -> str:
    """A real character of the reserved range as the byte code points of its UTF-8 bytes."""
    return "".join(chr(BYTE_BASE + b) for b in ch.encode("utf-8"))


def display_bytes(data: bytes) -> str:
    """Display string of a token's bytes: valid UTF-8 as text, every other byte as a byte code point.

    >>> display_bytes("€".encode()[:2]) == chr(BYTE_BASE + 0xE2) + chr(BYTE_BASE + 0x82)
    True
    """
    try:
        return display_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    out = []
    for ch in data.decode("utf-8", errors="surrogateescape"):
        code = ord(ch)
        if _SURROGATE_ESCAPE + 0x80 <= code <= _SURROGATE_ESCAPE + 0xFF:
            out.append(chr(code - _SURROGATE_ESCAPE + BYTE_BASE))
        elif is_byte_code_point(code):
            out.append(_as_byte_code_points(ch))
        else:
            out.append(ch)
    return "".join(out)


def display_text(text: str) -> str:
    """Display string of already-decoded text: only real characters of the reserved range change (to their bytes)."""
    return _RESERVED.sub(lambda match: _as_byte_code_points(match.group()), text)


def token_bytes(display: str) -> bytes:
    """The bytes a display string stands for (inverse of :func:`display_bytes`)."""
    out = bytearray()
    for ch in display:
        code = ord(ch)
        out += bytes([code - BYTE_BASE]) if is_byte_code_point(code) else ch.encode("utf-8")
    return bytes(out)


@lru_cache(maxsize=1)
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level table, reversed: the printable character standing for each byte → the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


@lru_cache(maxsize=1)
def _byte_level_tables() -> tuple[dict[int, int], re.Pattern[str]]:
    """``str.translate`` table from byte-level characters to the Latin-1 character of their byte, and a
    pattern matching any character outside the byte-level alphabet (fast paths of :func:`gpt2_byte_decoder`)."""
    table = gpt2_byte_decoder()
    outside = re.compile("[^" + "".join(re.escape(c) for c in table) + "]")
    return {ord(c): b for c, b in table.items()}, outside


@dataclass(frozen=True)
class PieceScheme:
    """How a tokenizer's vocabulary strings ("pieces") spell bytes.

    ``kind``: ``"byte_level"`` (GPT-2 byte table), ``"pieces"`` (SentencePiece-like:
    text with ``replacements`` such as ``▁`` → space, and ``<0xNN>`` byte tokens when
    ``byte_fallback``) or ``"decode"`` (unknown: use the tokenizer's own decode).
    """

    kind: Literal["byte_level", "pieces", "decode"]
    replacements: tuple[tuple[str, str], ...] = field(default=())
    byte_fallback: bool = False

    def piece_bytes(self, piece: str) -> bytes | None:
        """The bytes of one vocabulary piece, or ``None`` when this scheme cannot tell."""
        if self.kind == "byte_level":
            to_latin1, outside = _byte_level_tables()
            if outside.search(piece):
                return None
            return piece.translate(to_latin1).encode("latin-1")
        if self.kind == "pieces":
            match = _BYTE_FALLBACK.fullmatch(piece) if self.byte_fallback else None
            if match is not None:
                return bytes([int(match.group(1), 16)])
            for old, new in self.replacements:
                piece = piece.replace(old, new)
            return piece.encode("utf-8")
        return None


def _state(component: Any) -> dict[str, Any] | None:
    """The JSON description of a ``tokenizers`` decoder or pre-tokenizer (``None`` when absent)."""
    if component is None:
        return None
    try:
        state = json.loads(component.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _flatten(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The steps of a (possibly nested) ``Sequence`` decoder or pre-tokenizer, in order."""
    if state is None:
        return []
    inner = state.get("decoders", state.get("pretokenizers"))
    if state.get("type") == "Sequence" and isinstance(inner, list):
        return [step for item in inner if isinstance(item, dict) for step in _flatten(item)]
    return [state]


def _has_byte_pieces(backend: Any) -> bool:
    """Whether the model falls back to ``<0xNN>`` byte tokens: its ``byte_fallback`` flag (BPE), or all 256 such pieces (Unigram)."""
    if getattr(getattr(backend, "model", None), "byte_fallback", False) is True:
        return True
    to_id = getattr(backend, "token_to_id", None)
    return callable(to_id) and all(to_id(f"<0x{b:02X}>") is not None for b in range(256))


def piece_scheme(backend: Any) -> PieceScheme:
    """Read a ``tokenizers.Tokenizer``'s decoder (else its pre-tokenizer) to learn how its pieces spell bytes."""
    decoder, pre_tokenizer = getattr(backend, "decoder", None), getattr(backend, "pre_tokenizer", None)
    steps = _flatten(_state(decoder)) or _flatten(_state(pre_tokenizer))
    types = [step.get("type") for step in steps]
    if "ByteLevel" in types:
        return PieceScheme("byte_level")
    replacements: list[tuple[str, str]] = []
    for step in steps:
        if step.get("type") == "Metaspace" and isinstance(step.get("replacement"), str):
            replacements.append((step["replacement"], " "))
        elif step.get("type") == "Replace":
            pattern, content = step.get("pattern"), step.get("content")
            if isinstance(pattern, dict) and isinstance(pattern.get("String"), str) and isinstance(content, str):
                replacements.append((pattern["String"], content))
    byte_fallback = "ByteFallback" in types or _has_byte_pieces(backend)
    if replacements or byte_fallback:
        return PieceScheme("pieces", tuple(replacements), byte_fallback)
    return PieceScheme("decode")


class _PieceDisplay:
    """Display strings of a ``tokenizers.Tokenizer``'s ids, from its pieces and decoder (the adapters cache them).

    The decoder is read on first use, so wrapping a tokenizer costs nothing until a token is shown.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._scheme: PieceScheme | None = None
        self._added: set[int] = set()

    @property
    def size(self) -> int:
        """Number of ids of the backend, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def scheme(self) -> PieceScheme:
        """How the backend's pieces spell bytes (read once)."""
        if self._scheme is None:
            self._added = {int(i) for i in self.backend.get_added_tokens_decoder()}
            self._scheme = piece_scheme(self.backend)
        return self._scheme

    def __call__(self, token_id: int) -> str:
        """Display string of ``token_id`` (an id the backend has): the bytes of its piece when the scheme
        knows them; added tokens and unknown schemes decode."""
        scheme = self.scheme
        if token_id not in self._added:
            piece = self.backend.id_to_token(token_id)
            data = scheme.piece_bytes(piece) if isinstance(piece, str) else None
            if data is not None:
                return display_bytes(data)
        return display_text(self.backend.decode([token_id], skip_special_tokens=False))


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
        self._display = _PieceDisplay(tokenizer)
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
        self._display = _PieceDisplay(backend) if backend is not None else None

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
    match = _BYTE_FALLBACK.fullmatch(piece)
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
