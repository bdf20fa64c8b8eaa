"""Token strings as safe, visible text on the Python side (mirrors ``js/src/lib/tokens.ts``).

Used where Python writes tokens into HTML itself (the report's tables). Escaping
for HTML is separate (``html.escape``); this only makes invisible characters visible.

Raw bytes of a partial UTF-8 character travel as byte code points
(U+EF80–U+EFFF, see :mod:`circuitwidgets.tokenizer`) and are shown as ``\\xNN``
(NN ≥ 80); C1 control characters (U+0080–U+009F) are shown as ``\\u0080``-style
escapes so that the two never look alike.
"""

from __future__ import annotations

import re

_VISIBLE = {" ": "\u00b7", "\n": "\u23ce", "\t": "\u2192"}

BYTE_BASE = 0xEF00
"""Byte ``b`` (0x80–0xFF) outside any valid UTF-8 character travels as ``chr(BYTE_BASE + b)`` (as in ``tokens.ts``)."""


def is_invisible_format(code: int) -> bool:
    """Whether code point ``code`` is a bidi control (U+061C too), zero-width character, line/paragraph separator or tag character.

    Such characters would reorder or hide neighbouring text (a right-to-left
    override in one token can flip the labels after it), so they are shown escaped.
    """
    return (
        code == 0x061C
        or 0x200B <= code <= 0x200F
        or 0x2028 <= code <= 0x202E
        or 0x2060 <= code <= 0x2069
        or code == 0xFEFF
        or 0xE0000 <= code <= 0xE007F
    )


def is_byte_code_point(code: int) -> bool:
    """Whether ``code`` is a byte code point (U+EF80–U+EFFF): a raw byte of a partial UTF-8 character."""
    return BYTE_BASE + 0x80 <= code <= BYTE_BASE + 0xFF


def visible_token(token: str) -> str:
    """``token`` with whitespace shown as ``·⏎→``, C0 controls and raw bytes as ``\\xNN``, C1 controls and format characters as ``\\uXXXX``."""
    out = []
    for ch in token:
        code = ord(ch)
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif is_byte_code_point(code):
            out.append(f"\\x{code - BYTE_BASE:02x}")
        elif 0x80 <= code <= 0x9F or is_invisible_format(code):
            out.append(_hex4(code))
        else:
            out.append(ch)
    return "".join(out)


def _hex4(code: int) -> str:
    """``\\uXXXX``, or ``\\u{XXXXX}`` past U+FFFF (tag characters), as ``tokens.ts`` writes them."""
    return f"\\u{{{code:x}}}" if code > 0xFFFF else f"\\u{code:04x}"


def visible_label(text: str) -> str:
    """Any other string a page shows (a model's name, head labels, map names, titles), made safe to show.

    Control and invisible format characters (bidi overrides, U+061C, zero-width
    and tag characters) are escaped as in :func:`visible_token`, so ``abc\\u202eexe.txt``
    cannot show as "abctxt.exe"; spaces stay spaces. The one rule for every
    string that reaches a page, mirrored by ``visibleLabel`` in ``js/src/lib/tokens.ts``.
    HTML escaping is still the caller's (``html.escape``).
    """
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0x80 <= code <= 0x9F or is_invisible_format(code):
            out.append(_hex4(code))
        else:
            out.append(ch)
    return "".join(out)


_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\u\{([0-9a-fA-F]{5})\}")
_PLAIN = {v: k for k, v in _VISIBLE.items()}


def _unescape(match: re.Match[str]) -> str:
    """The character an escape shows: ``\\xNN`` below 80 a character, from 80 a raw byte; ``\\uXXXX`` a character."""
    if match.group(1) is not None:
        code = int(match.group(1), 16)
        return chr(code if code < 0x80 else BYTE_BASE + code)
    return chr(int(match.group(2) or match.group(3), 16))


def from_visible(text: str) -> str:
    """Undo :func:`visible_token`: ``·⏎→`` back to whitespace, ``\\xNN`` and ``\\uXXXX`` back to characters or bytes.

    Lets a user search for a token by typing what the view shows. Ambiguous
    for tokens that literally contain ``·`` or a backslash escape, so callers
    try the text as typed first.
    """
    unescaped = _ESCAPE.sub(_unescape, text)
    return "".join(_PLAIN.get(ch, ch) for ch in unescaped)
