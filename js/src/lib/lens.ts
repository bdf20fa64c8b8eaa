// Pure pieces of the LogitLens and LogitAttribution views: a lens cell's
// top-k in words and its shade, and the bars of a logit attribution with
// their running sum (tested without a DOM).

import type { NDArray } from "./arrays";
import { fmt } from "./svg";
import { tokenLabel } from "./tokens";

/** One prediction of a lens cell. */
export interface Prediction {
  token: string;
  prob: number;
}

/** The top-k of cell (row, pos) of `[rows, pos, k]` arrays, best first. */
export function predictions(ids: NDArray, probs: NDArray, vocab: readonly string[], row: number, pos: number): Prediction[] {
  const [rows = 0, n = 0, k = 0] = ids.shape;
  if (row < 0 || row >= rows || pos < 0 || pos >= n) return [];
  const out: Prediction[] = [];
  for (let j = 0; j < k; j++) {
    const at = (row * n + pos) * k + j;
    out.push({ token: vocab[ids.data[at] as number] ?? "?", prob: (probs.data[at] as number | undefined) ?? Number.NaN });
  }
  return out;
}

/** A probability as a percentage with the digits it needs ("31%", "0.4%"). */
export function percent(p: number): string {
  if (!Number.isFinite(p)) return "–";
  const v = p * 100;
  return `${v >= 9.95 ? v.toFixed(0) : v >= 0.995 ? v.toFixed(1) : v.toFixed(2)}%`;
}

/** The top-k in words: `'·foo' 31%, '(' 12%` (tokens as visible text). */
export function predictionText(preds: readonly Prediction[]): string {
  return preds.map((p) => `'${tokenLabel(p.token, 16).text}' ${percent(p.prob)}`).join(", ");
}

/** LUT index (on the diverging LUT's upper half: white → red) of a probability. */
export function probIndex(p: number): number {
  const t = Number.isFinite(p) ? Math.max(0, Math.min(1, p)) : 0;
  return 128 + Math.round(t * 127);
}

/** One bar of a logit attribution. */
export interface Bar {
  label: string;
  value: number;
  kind: string;
  layer: number;
  head: number;
}

/** Bars in the order asked: the model's (as given) or by size (|value|, largest first; "rest" kinds kept last). */
export function orderBars(bars: readonly Bar[], order: string): Bar[] {
  if (order !== "size") return [...bars];
  return [...bars].sort((a, b) => Math.abs(b.value) - Math.abs(a.value));
}

/** Each bar's start and end along the running sum (a waterfall), and the total. */
export function waterfall(bars: readonly Bar[]): { starts: number[]; ends: number[]; total: number; lo: number; hi: number } {
  const starts: number[] = [];
  const ends: number[] = [];
  let run = 0;
  let lo = 0;
  let hi = 0;
  for (const b of bars) {
    starts.push(run);
    run += Number.isFinite(b.value) ? b.value : 0;
    ends.push(run);
    lo = Math.min(lo, run, starts.at(-1) as number);
    hi = Math.max(hi, run, starts.at(-1) as number);
  }
  return { starts, ends, total: run, lo, hi };
}

/** The sentence under the bars: the parts' sum against the model's logit. */
export function sumSentence(total: number, logit: number | null, metric: string, digits = 3): string {
  const parts = `the parts sum to ${fmt(total, digits)}`;
  if (logit === null || !Number.isFinite(logit)) return `${metric}: ${parts}.`;
  const gap = Math.abs(total - logit);
  return `${metric}: ${parts}; the model's logit is ${fmt(logit, digits)}${gap < 10 ** -digits ? " (equal)" : ` (off by ${fmt(gap, digits + 2)})`}.`;
}
