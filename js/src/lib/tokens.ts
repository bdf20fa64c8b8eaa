// Token strings as safe, visible text.
//
// Tokens are user data: they are only ever written with `textContent`,
// `title` or canvas `fillText`, never parsed as HTML. Whitespace and control
// characters are made visible so that " the" and "the" do not look alike,
// and bidirectional controls are escaped so that they cannot reorder a label.
//
// The kernel sends each token as its bytes (circuitwidgets/tokenizer.py):
// SentencePiece's "▁" already turned into a space and "<0x0A>" into a newline,
// and every byte that is not part of a valid UTF-8 character (a byte-level
// BPE token holding the first two bytes of "€") as a byte code point
// U+EF80-U+EFFF (byte b at 0xEF00 + b, Private Use Area). Byte code points
// are shown as `\xNN` (lowercase hex, NN >= 80); C1 control characters
// (U+0080-U+009F) as `\u0080`-style escapes so the two never look alike.

/** Tokens longer than this (in code points, after escaping) are truncated. */
export const MAX_TOKEN_CHARS = 40;

const VISIBLE: Record<string, string> = {
  " ": "\u00b7", // ·
  "\n": "\u23ce", // ⏎
  "\t": "\u2192", // →
};

function hex2(code: number): string {
  return `\\x${code.toString(16).padStart(2, "0")}`;
}

function hex4(code: number): string {
  // Beyond the Basic Multilingual Plane (tag characters), `\u{XXXXX}`.
  return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** Byte b (0x80-0xFF) outside any valid UTF-8 character travels as code point BYTE_BASE + b. */
export const BYTE_BASE = 0xef00;

/** Whether `code` is a byte code point (U+EF80-U+EFFF): a raw byte of a partial UTF-8 character. */
export function isByteCodePoint(code: number): boolean {
  return code >= BYTE_BASE + 0x80 && code <= BYTE_BASE + 0xff;
}

/**
 * Invisible format characters that would reorder or hide neighbouring text:
 * bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E-F,
 * U+202A-E, U+2066-9), zero-width characters (U+200B-D, U+2060, U+FEFF), the
 * line and paragraph separators (U+2028-9) and tag characters (U+E0000-E007F,
 * invisible text). Shown as `\uXXXX` (`\u{XXXXX}` past U+FFFF) escapes so a
 * right-to-left override in a token cannot flip the label beside it.
 */
export function isInvisibleFormat(code: number): boolean {
  return (
    code === 0x061c ||
    (code >= 0x200b && code <= 0x200f) ||
    (code >= 0x2028 && code <= 0x202e) ||
    (code >= 0x2060 && code <= 0x2069) ||
    code === 0xfeff ||
    (code >= 0xe0000 && code <= 0xe007f)
  );
}

/**
 * Any other string a page shows (a model's name, head and layer labels, map
 * names, titles): the same escapes as a token's for control and invisible
 * format characters, but spaces stay spaces. One rule for every string that
 * reaches a page (Python: `circuitwidgets/_text.py`, `visible_label`).
 */
export function visibleLabel(text: string): string {
  let out = "";
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    if (code < 0x20 || code === 0x7f) out += hex2(code);
    else if ((code >= 0x80 && code <= 0x9f) || isInvisibleFormat(code)) out += hex4(code);
    else out += ch;
  }
  return out;
}

/** What one character of a token looks like: itself, a glyph, or an escape. */
function visibleChar(ch: string): string {
  const mapped = VISIBLE[ch];
  if (mapped !== undefined) return mapped;
  const code = ch.codePointAt(0) ?? 0;
  if (code < 0x20 || code === 0x7f) return hex2(code);
  if (isByteCodePoint(code)) return hex2(code - BYTE_BASE);
  if ((code >= 0x80 && code <= 0x9f) || isInvisibleFormat(code)) return hex4(code);
  return ch;
}

/**
 * The token with spaces, newlines and tabs shown as `·⏎→`, C0 control characters
 * and DEL as `\xNN`, raw bytes (byte code points) as `\xNN` (NN >= 80), and C1
 * controls and invisible format characters as `\uXXXX`.
 */
export function visibleToken(token: string): string {
  let out = "";
  for (const ch of token) out += visibleChar(ch);
  return out;
}

/** What to show for a token: short `text`, and the full text as `title` when truncated. */
export interface TokenLabel {
  text: string;
  title: string | null;
}

/**
 * Visible text of a token, truncated to `max` code points with an ellipsis
 * (fewer where the cut would split an escape; at least one character is kept).
 */
export function tokenLabel(token: string, max: number = MAX_TOKEN_CHARS): TokenLabel {
  const pieces = Array.from(token, visibleChar);
  const visible = pieces.join("");
  const length = (piece: string): number => Array.from(piece).length;
  if (pieces.reduce((n, piece) => n + length(piece), 0) <= max) return { text: visible, title: null };
  // Cut between whole characters, so an escape such as `\xe2` is never split.
  let text = "";
  let used = 0;
  for (const piece of pieces) {
    if (used > 0 && used + length(piece) > max - 1) break;
    text += piece;
    used += length(piece);
  }
  return { text: `${text}\u2026`, title: visible };
}

/** Write a token into an element as text (never HTML). */
export function setTokenText(el: HTMLElement, token: string, max: number = MAX_TOKEN_CHARS): void {
  const label = tokenLabel(token, max);
  el.textContent = label.text;
  if (label.title === null) el.removeAttribute("title");
  else el.title = label.title;
}

/** A `<span>` holding one token as text. */
export function tokenSpan(doc: Document, token: string, className = "cw-token"): HTMLSpanElement {
  const span = doc.createElement("span");
  span.className = className;
  setTokenText(span, token);
  return span;
}

/** Runs of this many or more of one whitespace character are written as the glyph and a count (`·×16`). */
export const COMPACT_RUN = 3;

/**
 * A token written compactly: as `tokenLabel`, but a run of `COMPACT_RUN` or more spaces, newlines or tabs is
 * written as its glyph and count (`"\n" + 16 spaces` → `⏎·×16`), so that indentation tokens of different
 * lengths look different and stay short. `title` holds the run lengths in words when anything was compacted.
 */
export function compactToken(token: string, max: number = MAX_TOKEN_CHARS): TokenLabel {
  const chars = Array.from(token);
  const pieces: string[] = [];
  const words: string[] = [];
  let compacted = false;
  for (let i = 0; i < chars.length; ) {
    const ch = chars[i] ?? "";
    let j = i;
    while (j < chars.length && chars[j] === ch) j++;
    const run = j - i;
    const glyph = VISIBLE[ch];
    if (glyph !== undefined && run >= COMPACT_RUN) {
      pieces.push(`${glyph}\u00d7${run}`);
      words.push(`${run} ${ch === " " ? "spaces" : ch === "\n" ? "newlines" : "tabs"}`);
      compacted = true;
    } else {
      for (let k = i; k < j; k++) pieces.push(visibleChar(chars[k] ?? ""));
      words.push(glyph !== undefined ? `${run} ${ch === " " ? (run === 1 ? "space" : "spaces") : ch === "\n" ? (run === 1 ? "newline" : "newlines") : run === 1 ? "tab" : "tabs"}` : visibleToken(chars.slice(i, j).join("")));
    }
    i = j;
  }
  const label = tokenLabel(pieces.join(""), max);
  // (the glyphs and escapes are already visible; tokenLabel leaves them as they are)
  if (!compacted) return tokenLabel(token, max);
  return { text: label.text, title: words.join(", ") };
}
