// Pure pieces of the HeadScores view: the colour scale of a per-head map, its
// colour-bar ticks, head labels and cell layout (tested without a DOM).

import { divergingIndex, sequentialIndex } from "./colour";
import { niceTicks, tickDigits } from "./svg";
import { visibleLabel } from "./tokens";

/** How a map's values become colours. */
export interface ScoreScale {
  kind: "sequential" | "diverging";
  /** Value at the bottom of the colour bar. */
  lo: number;
  /** Value at the top of the colour bar. */
  hi: number;
}

/**
 * The colour scale of `values`: `"diverging"` (symmetric about 0, white at 0)
 * when asked or, for `"auto"`, when a value is negative; else `"sequential"`
 * from min(0, smallest) to the largest value. Non-finite values are ignored.
 */
export function scoreScale(values: ArrayLike<number>, scale: string): ScoreScale {
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as number;
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo > hi) [lo, hi] = [0, 1];
  const diverging = scale === "diverging" || (scale !== "sequential" && lo < 0);
  if (diverging) {
    const limit = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    return { kind: "diverging", lo: -limit, hi: limit };
  }
  lo = Math.min(0, lo);
  if (hi <= lo) hi = lo + 1;
  return { kind: "sequential", lo, hi };
}

/** LUT index (0–255) of `v` on `s` (clamped to the scale's ends). */
export function scoreIndex(v: number, s: ScoreScale): number {
  if (s.kind === "diverging") return divergingIndex(Math.max(s.lo, Math.min(s.hi, v)), s.hi);
  return sequentialIndex((v - s.lo) / (s.hi - s.lo));
}

/** Round values for the colour bar inside its scale, about `count` of them (at least three), with the decimals they need. */
export function barTicks(s: ScoreScale, count = 4): { values: number[]; digits: number } {
  const within = (n: number) => niceTicks(s.lo, s.hi, n).filter((t) => t >= s.lo && t <= s.hi);
  let inner = within(count);
  if (inner.length < 3) inner = within(count * 2);
  const digits = Math.max(tickDigits(inner), 1);
  return { values: inner, digits };
}

/** Decimals that tell a map's values apart on its scale (2 for spans ≥ 0.5, more for narrower ones). */
export function valueDigits(s: ScoreScale): number {
  const span = s.hi - s.lo;
  if (!(span > 0)) return 2;
  return Math.max(2, Math.min(5, 1 - Math.floor(Math.log10(span))));
}

/** The label of row `layer` (from `labels` when given, else `L<layer>`). */
export function layerLabel(labels: readonly string[], layer: number): string {
  const label = labels[layer];
  return label === undefined ? `L${layer}` : visibleLabel(label);
}

/** The label of column `head` (from `labels` when given, else `H<head>`). */
export function headLabel(labels: readonly string[], head: number): string {
  const label = labels[head];
  return label === undefined ? `H${head}` : visibleLabel(label);
}

/** Size in pixels of a grid cell: fills `width` across `cols` within [min, max]. */
export function cellSize(width: number, cols: number, min = 14, max = 46): number {
  if (!(cols > 0)) return max;
  return Math.max(min, Math.min(max, Math.floor(width / cols)));
}

/** Approximate width in pixels of `text` at `fontSize` (labels are short; used to size margins). */
export function textWidth(text: string, fontSize = 11): number {
  return Math.ceil(Array.from(text).length * fontSize * 0.6);
}
