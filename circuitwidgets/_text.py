"""Token strings as safe, visible text on the Python side (mirrors ``js/src/lib/tokens.ts``).

Used where Python writes tokens into HTML itself (the report's tables). Escaping
for HTML is separate (``html.escape``); this only makes invisible characters visible.
"""

from __future__ import annotations

import re

_VISIBLE = {" ": "\u00b7", "\n": "\u23ce", "\t": "\u2192"}


def is_invisible_format(code: int) -> bool:
    """Whether code point ``code`` is a bidi control, zero-width character or line/paragraph separator.

    Such characters would reorder or hide neighbouring text (a right-to-left
    override in one token can flip the labels after it), so they are shown escaped.
    """
    return 0x200B <= code <= 0x200F or 0x2028 <= code <= 0x202E or 0x2060 <= code <= 0x2069 or code == 0xFEFF


def visible_token(token: str) -> str:
    """``token`` with whitespace shown as ``·⏎→``, control characters as ``\\xNN`` and format characters as ``\\uXXXX``."""
    out = []
    for ch in token:
        code = ord(ch)
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif is_invisible_format(code):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})")
_PLAIN = {v: k for k, v in _VISIBLE.items()}


def from_visible(text: str) -> str:
    """Undo :func:`visible_token`: ``·⏎→`` back to whitespace, ``\\xNN`` and ``\\uXXXX`` back to characters.

    Lets a user search for a token by typing what the view shows. Ambiguous
    for tokens that literally contain ``·`` or a backslash escape, so callers
    try the text as typed first.
    """
    unescaped = _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)
    return "".join(_PLAIN.get(ch, ch) for ch in unescaped)
