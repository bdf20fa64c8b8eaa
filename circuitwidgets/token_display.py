"""How a token is shown: its bytes as text, whatever the tokenizer's scheme.

Display strings are the token's *bytes*, not ``decode([id])``: a byte-level
BPE token that is the first two bytes of "€" decodes to a bare ``�``, and a
SentencePiece tokenizer's decoder strips the leading space of ``▁the``. So a
display string is read from the vocabulary entry and the tokenizer's decoder:
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
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from circuitwidgets._text import BYTE_BASE, is_byte_code_point

__all__ = [
    "BYTE_FALLBACK",
    "PieceDisplay",
    "PieceScheme",
    "display_bytes",
    "display_text",
    "gpt2_byte_decoder",
    "piece_scheme",
    "token_bytes",
]

_SURROGATE_ESCAPE = 0xDC00  # Python's ``errors="surrogateescape"`` puts byte b at U+DC00 + b
BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_RESERVED = re.compile(f"[{chr(BYTE_BASE + 0x80)}-{chr(BYTE_BASE + 0xFF)}]")


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
            match = BYTE_FALLBACK.fullmatch(piece) if self.byte_fallback else None
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


class PieceDisplay:
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
