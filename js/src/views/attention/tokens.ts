// The token strip: tokens as text (words as words, newlines break lines),
// shaded by attention, logit effect or loss, marked when hovered or selected.
// Virtualised: over `ALL_TOKENS` tokens only a window of `WINDOW` tokens
// around the viewport (or the selection) are DOM nodes.

import { DIVERGING, type Lut } from "../../lib/colour";
import { el } from "../../lib/dom";
import { NONE } from "../../lib/selection";
import { applyShades, ATTENTION, shadeIndices } from "../../lib/shading";
import { tokenWindow } from "../../lib/tiles";
import { tokenLabel } from "../../lib/tokens";
import type { Viewport } from "../../lib/viewport";
import type { Hover } from "./layout";

/** Up to this many tokens are all DOM nodes. */
export const ALL_TOKENS = 4096;
/** Beyond that, this many around the viewport are. */
export const WINDOW = 1024;

export class TokenStrip {
  private tokens: readonly string[] = [];
  private spans: HTMLSpanElement[] = [];
  private next = new Int16Array(0);
  private prev = new Int16Array(0);
  private prevKey = new Int16Array(0);
  private marked: { dest: number; src: number; hovered: number } = { dest: NONE, src: NONE, hovered: NONE };
  /** The tokens shown: `start..end-1`. */
  start = 0;
  end = 0;

  constructor(
    private readonly doc: Document,
    readonly box: HTMLElement,
  ) {}

  /** New tokens: show the first window. */
  load(tokens: readonly string[]): void {
    this.tokens = tokens;
    this.start = this.end = -1;
    this.show(0, Math.min(tokens.length, tokens.length > ALL_TOKENS ? WINDOW : tokens.length));
  }

  /** Follow the viewport (and the token in focus) when the tokens are too many to show at once. */
  follow(view: Viewport, focus: number): void {
    const n = this.tokens.length;
    if (n <= ALL_TOKENS) return;
    const w = tokenWindow(view, n, WINDOW, focus);
    if (w.start !== this.start || w.end !== this.end) this.show(w.start, w.end);
  }

  private show(start: number, end: number): void {
    const doc = this.doc;
    this.start = start;
    this.end = end;
    const spans: HTMLSpanElement[] = [];
    for (let i = start; i < end; i++) {
      const span = el(doc, "span", "cw-token");
      const label = tokenLabel(this.tokens[i] ?? "");
      span.textContent = label.text;
      span.title = `${i}: ${label.title ?? label.text}`;
      span.dataset.cwToken = String(i);
      spans.push(span);
    }
    this.spans = spans;
    const nodes: Node[] = [];
    const n = this.tokens.length;
    if (start > 0) nodes.push(el(doc, "span", "cw-more", `… ${start} earlier tokens (zoom or select to move) `));
    // words as words: a newline token ends its line (it still shows as ⏎)
    spans.forEach((span, k) => {
      nodes.push(span);
      if ((this.tokens[start + k] ?? "").endsWith("\n")) nodes.push(el(doc, "br"));
    });
    if (end < n) nodes.push(el(doc, "span", "cw-more", ` … ${n - end} later tokens`));
    this.box.replaceChildren(...nodes);
    this.next = new Int16Array(spans.length);
    this.prev = new Int16Array(spans.length).fill(-1);
    this.prevKey = new Int16Array(spans.length);
    this.marked = { dest: NONE, src: NONE, hovered: NONE };
  }

  /** Shade the shown tokens by `values` (one per shown token; null clears): in [0, 1] through `lut` (attention's
   * unless given), or signed with `limit`. */
  shade(values: ArrayLike<number> | null, limit = 0, lut: Lut = ATTENTION): void {
    shadeIndices(values, this.next, limit);
    const scale = limit > 0 ? DIVERGING : lut;
    // (the key tells the scales apart, so that a token keeping its index still changes colour with the scale)
    applyShades(this.spans, this.next, this.prev, scale, scale === DIVERGING ? 1 : scale === ATTENTION ? 0 : 2, this.prevKey);
  }

  /** Mark the selected destination and source and the hovered token. */
  mark(s: { dest: number; src: number }, hover: Hover): void {
    const hovered = hover.dest !== NONE && hover.src === NONE ? hover.dest : hover.src !== NONE && hover.dest === NONE ? hover.src : NONE;
    const set = (i: number, cls: string, on: boolean) => {
      if (i !== NONE) this.spans[i - this.start]?.classList.toggle(cls, on);
    };
    set(this.marked.dest, "cw-dest", false);
    set(this.marked.src, "cw-src", false);
    set(this.marked.hovered, "cw-hovered", false);
    set(s.dest, "cw-dest", true);
    set(s.src, "cw-src", true);
    set(hovered, "cw-hovered", true);
    this.marked = { dest: s.dest, src: s.src, hovered };
  }

  /** Scroll the strip so that token `i` is in sight (when it is shown). */
  scrollTo(i: number): void {
    const span = this.spans[i - this.start];
    if (span === undefined) return;
    const box = this.box;
    const top = span.offsetTop - box.offsetTop;
    if (top < box.scrollTop || top > box.scrollTop + box.clientHeight - span.offsetHeight) {
      box.scrollTop = Math.max(0, top - box.clientHeight / 2);
    }
  }

  /** The token index under an event, or NONE. */
  static indexOf(event: Event): number {
    const target = (event.target as Element | null)?.closest?.("[data-cw-token]");
    return target instanceof HTMLElement ? Number(target.dataset.cwToken) : NONE;
  }
}
