// Token strings as safe, visible text.
//
// Tokens are user data: they are only ever written with `textContent`,
// `title` or canvas `fillText`, never parsed as HTML. Whitespace and control
// characters are made visible so that " the" and "the" do not look alike,
// and bidirectional controls are escaped so that they cannot reorder a label.

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
  return `\\u${code.toString(16).padStart(4, "0")}`;
}

/**
 * Invisible format characters that would reorder or hide neighbouring text:
 * bidirectional marks, embeddings, overrides and isolates (U+200E-F,
 * U+202A-E, U+2066-9), zero-width characters (U+200B-D, U+2060, U+FEFF) and
 * the line and paragraph separators (U+2028-9). Shown as `\uXXXX` escapes so a
 * right-to-left override in a token cannot flip the label beside it.
 */
export function isInvisibleFormat(code: number): boolean {
  return (
    (code >= 0x200b && code <= 0x200f) ||
    (code >= 0x2028 && code <= 0x202e) ||
    (code >= 0x2060 && code <= 0x2069) ||
    code === 0xfeff
  );
}

/** The token with spaces, newlines, tabs and control characters made visible. */
export function visibleToken(token: string): string {
  let out = "";
  for (const ch of token) {
    const mapped = VISIBLE[ch];
    if (mapped !== undefined) {
      out += mapped;
      continue;
    }
    const code = ch.codePointAt(0) ?? 0;
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) out += hex2(code);
    else if (isInvisibleFormat(code)) out += hex4(code);
    else out += ch;
  }
  return out;
}

/** What to show for a token: short `text`, and the full text as `title` when truncated. */
export interface TokenLabel {
  text: string;
  title: string | null;
}

/** Visible text of a token, truncated to `max` code points with an ellipsis. */
export function tokenLabel(token: string, max: number = MAX_TOKEN_CHARS): TokenLabel {
  const visible = visibleToken(token);
  const chars = Array.from(visible);
  if (chars.length <= max) return { text: visible, title: null };
  return { text: `${chars.slice(0, Math.max(1, max - 1)).join("")}\u2026`, title: visible };
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
