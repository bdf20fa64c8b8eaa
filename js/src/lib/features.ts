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

/** A search hit: the unit and the token that matched (its top example's own token, or a token it promotes). */
export interface SearchHit {
  unit: number;
  token: string;
  where: "top" | "promotes";
}

/**
 * Units whose top example's own token or a promoted token contains `query`
 * (case-sensitive, as tokens are), at most `limit`, in unit order, each with
 * the token that matched (the top token first, else the first promoted one).
 */
export function searchUnits(query: string, a: DashboardArrays, up: NDArray, vocab: readonly string[], centre: number, limit = 100): SearchHit[] {
  if (query === "") return [];
  const [nUnits, nEx, width] = a.ctxTokens.shape as [number, number, number];
  const nUp = up.shape[1] ?? 0;
  const matches = vocab.map((t) => t.includes(query));
  const hits: SearchHit[] = [];
  for (let u = 0; u < nUnits && hits.length < limit; u++) {
    const own = nEx > 0 ? (a.ctxTokens.data[u * nEx * width + centre] as number) : vocab.length;
    if (own < vocab.length && matches[own] === true) {
      hits.push({ unit: u, token: vocab[own] ?? "", where: "top" });
      continue;
    }
    for (let j = 0; j < nUp; j++) {
      const id = up.data[u * nUp + j] as number;
      if (matches[id] === true) {
        hits.push({ unit: u, token: vocab[id] ?? "", where: "promotes" });
        break;
      }
    }
  }
  return hits;
}

/**
 * Histogram bars of `unit`: `{ lo, hi, count }` per bin on the shared edges, from its first non-empty bin to its
 * last, the last bar's upper edge cut at `largest` (the unit's largest activation, which the header states) when
 * it falls inside that bar: the axis spans exactly the activations seen.
 */
export function histogramBars(hist: NDArray, edges: NDArray, unit: number, largest = Number.NaN): { lo: number; hi: number; count: number }[] {
  const counts = rowOf(hist, unit);
  const bars = counts.map((count, i) => ({ lo: edges.data[i] as number, hi: edges.data[i + 1] as number, count }));
  const first = bars.findIndex((b) => b.count > 0);
  if (first < 0) return [];
  const last = bars.length - 1 - [...bars].reverse().findIndex((b) => b.count > 0);
  const kept = bars.slice(first, last + 1);
  const top = kept[kept.length - 1];
  if (top !== undefined && largest > top.lo && largest < top.hi) top.hi = largest;
  return kept;
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

/** A number in three significant figures (`0.0213`, `-1.25`, `44.5`, `1.23e+4`), as the dashboards state them. */
export function sig3(v: number): string {
  if (!Number.isFinite(v)) return "–";
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1e4 || a < 1e-3 ? v.toExponential(2) : v.toPrecision(3);
}

/** Share of tokens above which a unit is called dense (the kernel's `dense_share`), as a percentage in words. */
export function denseWords(share: number): string {
  return `active on more than ${sig3(share * 100)}% of tokens`;
}
