// Token strings and what they must look like, shared by js/tests/tokens.test.ts
// (visibleToken) and tests/test_tokenizer.py (circuitwidgets/_text.py
// visible_token), so the Python mirror cannot drift from the views. The array
// literal between the markers is JSON (Python reads it with json.loads): keep
// it so. Byte code points U+EF80-U+EFFF (raw bytes of a partial UTF-8
// character) are written as \uXXXX escapes.

export const MIRROR_CASES: [string, string][] = /* json */ [
  [" the", "\u00b7the"],
  ["a\nb\tc", "a\u23ceb\u2192c"],
  ["\r", "\\x0d"],
  ["nul\u0000\u007f", "nul\\x00\\x7f"],
  ["\u0080\u0085\u009f", "\\u0080\\u0085\\u009f"],
  ["abc\u202edef", "abc\\u202edef"],
  ["\u2066x\u2069\u200b\ufeff", "\\u2066x\\u2069\\u200b\\ufeff"],
  ["\u05e9\u05dc\u05d5\u05dd e\u0301 \ud83e\udd80", "\u05e9\u05dc\u05d5\u05dd\u00b7e\u0301\u00b7\ud83e\udd80"],
  ["\uefe2\uef82", "\\xe2\\x82"],
  [" \uefe2\uef80", "\u00b7\\xe2\\x80"],
  ["\uef80\uefff", "\\x80\\xff"],
  ["na\uefc3", "na\\xc3"],
  ["\\xe2", "\\xe2"],
  ["\u2581the", "\u2581the"],
  ["\uef7f\uf000\ue000", "\uef7f\uf000\ue000"],
  ["\u20ac \u2014 \u00e9", "\u20ac\u00b7\u2014\u00b7\u00e9"],
  ["a\u061cb", "a\\u061cb"],
  ["x\udb40\udc41\udb40\udc7fy", "x\\u{e0041}\\u{e007f}y"]
] /* end json */;

// Names, labels and titles (visibleLabel / visible_label): the same escapes, spaces kept.
export const LABEL_CASES: [string, string][] = /* json */ [
  ["abc\u202eexe.txt", "abc\\u202eexe.txt"],
  ["layer 0 \u2066head\u2069", "layer 0 \\u2066head\\u2069"],
  ["a\u061cb\tc\n", "a\\u061cb\\x09c\\x0a"],
  ["tag\udb40\udc41", "tag\\u{e0041}"],
  ["\u05e9\u05dc\u05d5\u05dd model", "\u05e9\u05dc\u05d5\u05dd model"]
] /* end json */;
