// Pure helpers of the feature views (FeatureDashboard, PromptFeatures): no DOM.
//
// A dashboard's arrays hold every unit of a layer; these read one unit's
// examples, histogram and token lists out of them, search units by token,
// and pick the columns of a long prompt that are in view.

import type { NDArray } from "./arrays";

/** One example of a unit: its activation, its window's tokens (as text) and their shades (0..1). */
export interface Example {
  value: number;
  quantile: number;
  tokens: string[];
  shades: number[];
  centre: number;
}

/** The dashboard's arrays, decoded. */
export interface DashboardArrays {
  ctxTokens: NDArray; // [n_units, n_examples, width] indices into vocab (vocab.length: no token)
  ctxShade: NDArray; // uint8, same shape
  exValue: NDArray; // float32 [n_units, n_examples]
  exQuantile: NDArray; // float32 [n_units, n_examples]
}

/** Examples `from..to-1` of `unit` (those with a value), tokens as strings. */
export function unitExamples(a: DashboardArrays, vocab: readonly string[], unit: number, from: number, to: number, centre: number): Example[] {
  const [, nEx, width] = a.ctxTokens.shape as [number, number, number];
  const out: Example[] = [];
  for (let e = from; e < Math.min(to, nEx); e++) {
    const value = a.exValue.data[unit * nEx + e] as number;
    if (Number.isNaN(value)) continue;
    const tokens: string[] = [];
    const shades: number[] = [];
    let mid = centre;
    for (let w = 0; w < width; w++) {
      const at = (unit * nEx + e) * width + w;
      const id = a.ctxTokens.data[at] as number;
      if (id >= vocab.length) {
        if (w < centre) mid -= 1; // (a window cut by the row's start)
        continue;
      }
      tokens.push(vocab[id] ?? "");
      shades.push((a.ctxShade.data[at] as number) / 255);
    }
    out.push({ value, quantile: a.exQuantile.data[unit * nEx + e] as number, tokens, shades, centre: mid });
  }
  return out;
}

/** Row `unit` of a `[n_units, n]` array as numbers. */
export function rowOf(array: NDArray, unit: number): number[] {
  const n = array.shape[1] ?? 0;
  return Array.from(array.data.subarray(unit * n, unit * n + n) as ArrayLike<number>);
}

/**
 * Units whose top example's own token or a promoted token contains `query`
 * (case-sensitive, as tokens are), at most `limit`, in unit order.
 */
export function searchUnits(query: string, a: DashboardArrays, up: NDArray, vocab: readonly string[], centre: number, limit = 100): number[] {
  if (query === "") return [];
  const [nUnits, nEx, width] = a.ctxTokens.shape as [number, number, number];
  const nUp = up.shape[1] ?? 0;
  const matches = vocab.map((t) => t.includes(query));
  const hits: number[] = [];
  for (let u = 0; u < nUnits && hits.length < limit; u++) {
    const own = nEx > 0 ? (a.ctxTokens.data[u * nEx * width + centre] as number) : vocab.length;
    let hit = own < vocab.length && matches[own] === true;
    for (let j = 0; j < nUp && !hit; j++) hit = matches[up.data[u * nUp + j] as number] === true;
    if (hit) hits.push(u);
  }
  return hits;
}

/** Histogram bars of `unit`: `{ lo, hi, count }` per non-empty run of bins, on the shared edges. */
export function histogramBars(hist: NDArray, edges: NDArray, unit: number): { lo: number; hi: number; count: number }[] {
  const counts = rowOf(hist, unit);
  const bars: { lo: number; hi: number; count: number }[] = [];
  counts.forEach((count, i) => {
    bars.push({ lo: edges.data[i] as number, hi: edges.data[i + 1] as number, count });
  });
  let first = bars.findIndex((b) => b.count > 0);
  let last = bars.length - 1 - [...bars].reverse().findIndex((b) => b.count > 0);
  if (first < 0) return [];
  first = Math.max(0, first - 1);
  last = Math.min(bars.length - 1, last + 1);
  return bars.slice(first, last + 1);
}

/** The columns `[start, end)` of a strip of `n` columns `width` px wide that are in view (plus `overscan` each side). */
export function columnWindow(scrollLeft: number, viewWidth: number, width: number, n: number, overscan = 16): { start: number; end: number } {
  const start = Math.max(0, Math.floor(scrollLeft / width) - overscan);
  const end = Math.min(n, Math.ceil((scrollLeft + Math.max(viewWidth, width)) / width) + overscan);
  return { start, end: Math.max(start, end) };
}

/** A number in a few significant digits (`3.21`, `0.0042`, `1.2e+4`). */
export function short(v: number): string {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-2 || a >= 1e4)) return v.toExponential(1);
  return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}
