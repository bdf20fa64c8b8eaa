// Pure helpers of the superposition view: where a model's arrays sit in the
// grid/live layout, the slider grid's nearest cell, log-scale slider mapping,
// and the paper's fixed vocabulary (sticky fractions, phase names). No
// science here: every measurement arrives computed by the kernel.

import type { NDArray } from "./arrays";

/** Feature dimensionalities the paper found features sticking to, with their geometry. */
export const STICKY_FRACTIONS: readonly { value: number; label: string }[] = [
  { value: 1, label: "1" },
  { value: 3 / 4, label: "3/4" },
  { value: 2 / 3, label: "2/3" },
  { value: 1 / 2, label: "1/2" },
  { value: 2 / 5, label: "2/5" },
  { value: 1 / 3, label: "1/3" },
];

/** Phase codes of the kernel's phase diagram → name and colour. */
export const PHASES: readonly { name: string; colour: string }[] = [
  { name: "not represented", colour: "#f2f2f2" },
  { name: "dedicated dimension", colour: "#0072B2" },
  { name: "superposition", colour: "#D55E00" },
];

/** Norm above which a feature counts as represented (the paper's 0.5). */
export const REPRESENTED = 0.5;

/** Index of the value of `values` nearest to `v` in log scale (values > 0). */
export function nearestLog(values: ArrayLike<number>, v: number): number {
  let best = 0;
  let gap = Infinity;
  for (let i = 0; i < values.length; i++) {
    const d = Math.abs(Math.log(values[i] as number) - Math.log(v));
    if (d < gap) {
      gap = d;
      best = i;
    }
  }
  return best;
}

/** Whether `a` and `b` are the same slider value (float32 round trip). */
export function sameValue(a: number, b: number): boolean {
  return Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(a), Math.abs(b));
}

/** A slider position in [0, 1000] → value on a log scale from `hi` (position 0) down to `lo` (1000). */
export function logSliderValue(position: number, lo: number, hi: number): number {
  const t = Math.max(0, Math.min(1000, position)) / 1000;
  return Number((hi * (lo / hi) ** t).toPrecision(3));
}

/** The inverse of `logSliderValue`. */
export function logSliderPosition(value: number, lo: number, hi: number): number {
  if (!(value > 0) || lo === hi) return 0;
  return Math.round((1000 * Math.log(value / hi)) / Math.log(lo / hi));
}

/** One model's trajectory inside `[P, D, T, ...rest]` arrays: cell (p, d). */
export interface Cell {
  source: "grid" | "live";
  p: number;
  d: number;
}

/** Offset and length of snapshot `t` of cell (p, d) in an array shaped `[P, D, T, ...rest]`. */
export function slot(array: NDArray, p: number, d: number, t: number): { start: number; length: number } {
  const [P = 0, D = 0, T = 0, ...rest] = array.shape;
  const length = rest.reduce((a, b) => a * b, 1);
  if (p < 0 || p >= P || d < 0 || d >= D || t < 0 || t >= T) return { start: 0, length: 0 };
  return { start: ((p * D + d) * T + t) * length, length };
}

/** The values of snapshot `t` of cell (p, d), as a view into `array`'s data. */
export function snapshotOf(array: NDArray, p: number, d: number, t: number): Float32Array {
  const { start, length } = slot(array, p, d, t);
  return (array.data as Float32Array).subarray(start, start + length);
}

/** Columns of a `[m, n]` weight matrix as points in the plane of hidden dimensions 0 and 1 (0 for m = 1). */
export function featurePoints(W: ArrayLike<number>, m: number, n: number): { x: number; y: number }[] {
  const out: { x: number; y: number }[] = [];
  for (let i = 0; i < n; i++) out.push({ x: (W[i] as number) ?? 0, y: m > 1 ? ((W[n + i] as number) ?? 0) : 0 });
  return out;
}

/** "1/(1−S)" of a feature probability, for the dimensionality axis. */
export function inverseDensity(probability: number): number {
  return 1 / probability;
}

/** The feature-dimensionality points of one decay column: x = 1/(1 − S), y = D_i, for represented features. */
export function dimensionalityPoints(
  probabilities: ArrayLike<number>,
  dims: NDArray,
  norms: NDArray,
  d: number,
  t: number,
): { x: number; y: number; p: number; feature: number }[] {
  const out: { x: number; y: number; p: number; feature: number }[] = [];
  for (let p = 0; p < probabilities.length; p++) {
    const dim = snapshotOf(dims, p, d, t);
    const norm = snapshotOf(norms, p, d, t);
    for (let i = 0; i < dim.length; i++) {
      if ((norm[i] as number) > REPRESENTED) out.push({ x: inverseDensity(probabilities[p] as number), y: dim[i] as number, p, feature: i });
    }
  }
  return out;
}

/** Count of represented features (norm > 0.5). */
export function representedCount(norms: ArrayLike<number>): number {
  let k = 0;
  for (let i = 0; i < norms.length; i++) if ((norms[i] as number) > REPRESENTED) k++;
  return k;
}
