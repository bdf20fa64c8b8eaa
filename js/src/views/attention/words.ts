// The attention view in words: the legend, the status line (the selection
// described), the hover line, the zoom line and the token strip's hint.

import { type ColourScale, WHEEL_HINT } from "../../lib/attentionui";
import { DIVERGING, type Lut, signLegend } from "../../lib/colour";
import { el } from "../../lib/dom";
import { NONE } from "../../lib/selection";
import { ATTENTION, lutGradient } from "../../lib/shading";
import { fmt } from "../../lib/svg";
import { tokenLabel } from "../../lib/tokens";
import { isFull, type Viewport } from "../../lib/viewport";
import { DIAGONAL_COLOURS, type Hover, type Sel } from "./layout";
import type { LongSource } from "./long";
import type { PatternSource, Weight } from "./source";
import { LOSS_LABEL, positionWords, type Strip, stripHint, stripLut } from "./strip";

export type Kind = "raw" | "value";

/** What the words are about. */
export interface Subject {
  tokens: readonly string[];
  /** The pattern shown (raw or value-weighted). */
  shown: PatternSource;
  raw: PatternSource;
  value: PatternSource | null;
  norms: Float32Array | null;
  effect: Float32Array | null;
  /** The loss per position `[n]`, or null. */
  loss: Float32Array | null;
  /** What the strip beside the pattern shows, or null. */
  strip: Strip | null;
  long: LongSource | null;
  kind: Kind;
  scale: ColourScale;
}

/** Token `i` with its text. */
export function describe(tokens: readonly string[], i: number): string {
  const token = tokens[i];
  return token === undefined ? `${i}` : `${i} “${tokenLabel(token, 18).text}”`;
}

/** A weight as known: exact, or at most a block's max. */
export function weightWords(w: Weight): string {
  if (w.value < 0) return "masked (later token)";
  if (Number.isNaN(w.value)) return "not known yet";
  return w.exact ? fmt(w.value, 3) : `≤ ${fmt(w.value, 3)} (max of a ${w.block} × ${w.block} block; zoom in for single weights)`;
}

function bar(doc: Document, lut: Lut, left: string, middle: string, right: string, title: string): HTMLElement {
  const wrap = el(doc, "span", "cw-bar");
  const swatch = el(doc, "i");
  swatch.style.background = lutGradient(lut);
  wrap.append(el(doc, "span", undefined, left), swatch, el(doc, "span", undefined, right));
  wrap.title = title;
  if (middle) wrap.prepend(el(doc, "span", undefined, middle));
  return wrap;
}

/** The legend's items: colour bars, and the offset diagonals when shown. */
export function legendItems(doc: Document, s: Sel, d: Subject, diagonals: readonly { offset: number; label: string }[] | null): HTMLElement[] {
  const items: HTMLElement[] = [];
  const what = d.kind === "value" ? "value-weighted (row-normalised)" : d.long !== null ? "attention (block max where zoomed out)" : "attention";
  const scaleNote = d.scale === "row" ? ", each row ÷ its max" : d.scale === "gamma" ? ", √ scale" : "";
  items.push(
    bar(
      doc,
      ATTENTION,
      "0",
      `${what}${scaleNote}`,
      d.scale === "row" ? "row max" : "1",
      (d.kind === "value" ? "A[dest, src] · ‖v_src W_O‖, divided by its row sum" : "Attention weight") +
        (d.scale === "row" ? "; colour relative to the row's largest weight" : d.scale === "gamma" ? "; colour ∝ √weight" : ""),
    ),
  );
  const strip = d.strip;
  if (strip?.kind === "logit_effect") {
    items.push(bar(doc, DIVERGING, fmt(-strip.limit), "logit effect on next token", `+${fmt(strip.limit)}`, `(r_i W_O W_U)[next token]: ${signLegend("raises its logit", "lowers it")}`));
  } else if (strip?.kind === "loss") {
    const title = "−log p(next token | the tokens so far), per position: the same for every head";
    items.push(bar(doc, stripLut(strip), "0", LOSS_LABEL, fmt(strip.limit), title));
  }
  (diagonals ?? []).forEach((diag, k) => {
    const chip = el(doc, "span", "cw-chip");
    chip.style.borderTopColor = DIAGONAL_COLOURS[k % DIAGONAL_COLOURS.length] as string;
    const item = el(doc, "span");
    item.append(chip, doc.createTextNode(`${diag.label} (dest − src = ${diag.offset})`));
    items.push(item);
  });
  return items;
}

function topOf(weights: Float32Array): number {
  let best = NONE;
  let bestW = -1;
  weights.forEach((w, i) => {
    if (w > bestW) {
      bestW = w;
      best = i;
    }
  });
  return best;
}

/** The status line: the head, the selection in words, what is loaded. */
export function statusText(s: Sel, d: Subject): string {
  const p = d.shown;
  const n = p.nTokens;
  const say = (i: number) => describe(d.tokens, i);
  const parts = [`Layer ${s.layer}, head ${s.head} (${d.kind === "value" ? "value-weighted" : "raw"} pattern)`];
  const ready = p.ready(s.layer, s.head);
  if (ready && !p.complete(s.layer, s.head)) parts.push("rows still loading");
  if (!ready) parts.push("loading");
  else if (s.dest !== NONE && s.src !== NONE) {
    parts.push(`destination ${say(s.dest)} → source ${say(s.src)}: ${weightWords(p.weight(s.layer, s.head, s.dest, s.src))}`);
  } else if (s.dest !== NONE && d.long === null) {
    const row = p.row(s.layer, s.head, s.dest, 0, n) as Float32Array;
    const top = topOf(row);
    parts.push(`destination ${say(s.dest)} attends most to ${say(top)} (${fmt(row[top] ?? 0, 3)})`);
  } else if (s.src !== NONE && d.long === null) {
    const col = p.column(s.layer, s.head, s.src, 0, n) as Float32Array;
    const top = topOf(col);
    parts.push(`source ${say(s.src)} is attended most by ${say(top)} (${fmt(col[top] ?? 0, 3)})`);
  } else if (s.dest !== NONE || s.src !== NONE) parts.push(`${s.dest !== NONE ? `destination ${say(s.dest)}` : `source ${say(s.src)}`} selected`);
  else parts.push("no token selected: click a token or a cell");
  const values = s.dest !== NONE && d.tokens[s.dest + 1] !== undefined ? positionWords(d.tokens, s.dest, ...perPositionAt(s, d, s.dest)) : "";
  if (values) parts.push(values.slice(" · ".length));
  const total = p.nLayers * p.nHeads;
  const loaded = p.readyCount();
  if (loaded < total) parts.push(`heads loaded ${loaded} of ${total}`);
  if (d.long !== null && !d.long.offline && d.long.store.pending > 0) parts.push(`tiles loading: ${d.long.store.pending}`);
  if (d.long?.store.lastError) parts.push(`kernel: ${d.long.store.lastError}`);
  return `${parts.join(" · ")}.`;
}

/** The hover line: the hovered cell, row or column in words. */
export function hoverText(s: Sel, hover: Hover, d: Subject): string {
  const p = d.shown;
  const { dest, src } = hover;
  const say = (i: number) => describe(d.tokens, i);
  if (!p.ready(s.layer, s.head) || (dest === NONE && src === NONE)) return "";
  if (dest !== NONE && src !== NONE) {
    const raw = d.raw.weight(s.layer, s.head, dest, src);
    if (raw.value < 0) return `${say(dest)} → ${say(src)}: masked (a destination only attends to earlier tokens)`;
    let text = `${say(dest)} → ${say(src)}: attention ${weightWords(raw)}`;
    if (d.value !== null && d.value.ready(s.layer, s.head)) text += ` · value-weighted ${weightWords(d.value.weight(s.layer, s.head, dest, src))}`;
    if (d.norms !== null && raw.exact) {
      const norm = d.norms[(s.layer * p.nHeads + s.head) * p.nTokens + src] as number;
      text += ` · A·‖vW_O‖ ≈ ${fmt(raw.value * norm, 3)}`;
    }
    return text;
  }
  // (one value, the strip's: a hover line that wrapped to a second line would move the tokens under the pointer)
  if (dest !== NONE) return `destination ${say(dest)}${positionWords(d.tokens, dest, ...perPositionAt(s, d, dest, true))}`;
  return `source ${say(src)}: shading shows how much each destination attends to it${positionWords(d.tokens, src, ...perPositionAt(s, d, src, true))}`;
}

/** What the zoom line says: the wheel hint, the rows and columns in view, and what an exported page can show there. */
export function zoomWords(view: Viewport, n: number, long: LongSource | null, sidePx: number): string {
  if (isFull(view, n)) return n > 16 ? WHEEL_HINT : "";
  const where = `rows ${view.r0}–${view.r0 + view.size - 1}, columns ${view.c0}–${view.c0 + view.size - 1} of ${n}`;
  if (long?.finerThanExport(view, sidePx)) {
    const holds = long.kind === "raw" ? `each row's top ${long.topK} sources at full resolution` : "the value-weighted overview only";
    return `${where} · exported page: ${holds}; finer zoom needs a live kernel`;
  }
  return where;
}

/** Position `i`'s logit effect (the selected head's) and loss, each null when not sent (or, `stripOnly`, not the
 * strip's), and which the strip shows (first). */
function perPositionAt(s: Sel, d: Subject, i: number, stripOnly = false): [number | null, number | null, Strip["kind"]] {
  const n = d.raw.nTokens;
  const kind = d.strip?.kind ?? "logit_effect";
  const effect = d.effect === null || (stripOnly && kind !== "logit_effect") ? null : (d.effect[(s.layer * d.raw.nHeads + s.head) * n + i] as number);
  const loss = d.loss === null || (stripOnly && kind !== "loss") ? null : (d.loss[i] as number);
  return [effect ?? null, loss ?? null, kind];
}

/** The token strip's hint for what it shows (the strip's values) or how hovering reads. */
export function tokenHint(mode: Strip["kind"] | "dest" | "src"): string {
  if (mode === "logit_effect" || mode === "loss") return stripHint(mode);
  return mode === "dest"
    ? "Hover a token to shade where it attends; click to select it as destination."
    : "Hover a token to shade which tokens attend to it; click to select it as source.";
}
