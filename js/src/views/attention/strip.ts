// What the strip beside the pattern (and the tokens, when they show it)
// shades: the selected head's direct logit effect on the next token (signed,
// one value per head and position), or the model's loss predicting the next
// token (nats, one value per position: the same for every head). The `strip`
// trait chooses; when only one of the two was sent, that one is shown.

import type { WireArray } from "../../lib/arrays";
import { decodeOptional } from "../../lib/arrays";
import { DIVERGING, divergingIndex, type Lut, makeLut, sequentialIndex, signLegend } from "../../lib/colour";
import { absMax } from "../../lib/patterns";
import { fmt } from "../../lib/svg";
import { tokenLabel } from "../../lib/tokens";

export type StripKind = "logit_effect" | "loss";

/** ColorBrewer "Oranges", pale (low loss) → dark (high): sequential, colour-blind safe, unlike the attention colours. */
export const LOSS: Lut = makeLut(["#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913", "#d94801", "#a63603", "#7f2704"]);

/** The legend's and the hints' name of the loss (it is per position, not per head). */
export const LOSS_LABEL = "loss (nats) predicting the next token";

/** The values the strip shows for the selected head: `values[offset .. offset + n - 1]` on a scale up to `limit`. */
export interface Strip {
  kind: StripKind;
  values: Float32Array;
  offset: number;
  n: number;
  /** Largest magnitude among the shown values (the scale's end; 0 when none is finite). */
  limit: number;
}

/** The shown prompt's loss `[n]` from `per_token_loss` (`[n]`, or `[n_prompts, width]` for a batch), or null when absent or mis-shaped. */
export function perTokenLoss(wire: WireArray | null | undefined, n: number, prompt = 0, width = n): Float32Array | null {
  const a = decodeOptional(wire);
  if (a === null || !(a.data instanceof Float32Array)) return null;
  if (a.shape.length === 1) return a.data.length === n ? a.data : null;
  if (a.shape.length !== 2 || a.shape[1] !== width || prompt >= (a.shape[0] ?? 0) || n > width) return null;
  return a.data.subarray(prompt * width, prompt * width + n);
}

/** Largest finite value of `values` (0 when none). */
function finiteMax(values: Float32Array): number {
  let top = 0;
  for (const v of values) if (Number.isFinite(v) && v > top) top = v;
  return top;
}

/** What the strip shows: the `choice` when its data is there, else whichever is; null when neither was sent. */
export function chooseStrip(
  choice: unknown,
  effect: Float32Array | null,
  loss: Float32Array | null,
  s: { layer: number; head: number },
  nHeads: number,
  n: number,
): Strip | null {
  if (loss !== null && (choice === "loss" || effect === null)) return { kind: "loss", values: loss, offset: 0, n, limit: finiteMax(loss) };
  if (effect === null) return null;
  const offset = (s.layer * nHeads + s.head) * n;
  return { kind: "logit_effect", values: effect, offset, n, limit: absMax(effect, offset, n) };
}

/** The colours of a strip: diverging for the signed logit effect, sequential for the loss. */
export function stripLut(strip: Strip): Lut {
  return strip.kind === "loss" ? LOSS : DIVERGING;
}

/** LUT index of one value of `strip` (-1: none, NaN). */
export function stripIndex(strip: Strip, v: number): number {
  if (Number.isNaN(v)) return -1;
  if (strip.kind === "loss") return sequentialIndex(strip.limit > 0 ? v / strip.limit : 0);
  return divergingIndex(v, strip.limit);
}

/** The strip's value at position `i` (NaN outside). */
export function stripValue(strip: Strip, i: number): number {
  return i >= 0 && i < strip.n ? (strip.values[strip.offset + i] as number) : Number.NaN;
}

/** The token shading of positions `start..end-1`: values, signed limit (0: sequential) and colours for `TokenStrip.shade`. */
export function stripShades(strip: Strip, start: number, end: number): { values: Float32Array; limit: number; lut: Lut } {
  const values = strip.values.subarray(strip.offset + start, strip.offset + end);
  if (strip.kind === "logit_effect") return { values, limit: strip.limit || 1, lut: DIVERGING };
  // the loss: as a fraction of the prompt's largest, on the sequential scale
  const scaled = new Float32Array(values.length);
  values.forEach((v, k) => (scaled[k] = strip.limit > 0 ? v / strip.limit : Number.NaN));
  return { values: scaled, limit: 0, lut: LOSS };
}

/** What one position's per-position values say, `first` first: e.g. ` · loss predicting “ mat”: 2.314 nats · logit effect on
 * next token “ mat”: +0.12`; empty when neither was sent. */
export function positionWords(tokens: readonly string[], i: number, effect: number | null, loss: number | null, first: StripKind): string {
  const next = tokens[i + 1];
  if (effect === null && loss === null) return "";
  if (next === undefined) return " (last token: no next token)";
  const word = tokenLabel(next, 18).text;
  const parts: [StripKind, string][] = [];
  if (effect !== null && !Number.isNaN(effect)) parts.push(["logit_effect", `logit effect on next token “${word}”: ${effect >= 0 ? "+" : ""}${fmt(effect)}`]);
  if (loss !== null && !Number.isNaN(loss)) parts.push(["loss", `loss predicting “${word}”: ${fmt(loss, 3)} nats`]);
  parts.sort((a, b) => Number(b[0] === first) - Number(a[0] === first));
  return parts.map(([, text]) => ` · ${text}`).join("");
}

/** The token hint when the tokens show the strip. */
export function stripHint(kind: StripKind): string {
  return kind === "loss"
    ? "Tokens shaded by the model's loss (nats) predicting the next token: darker is a worse prediction (per position: the same for every head)."
    : `Tokens shaded by this head's direct effect on the logit of the next token (${signLegend("raises it", "lowers it")}).`;
}
