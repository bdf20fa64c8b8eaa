// Pure pieces of the CompositionVsPatching view: one point per (earlier head,
// later head) pair, composition score against path-patching effect; the axes'
// words, the plot's domain, which points carry a label, Pearson's r. No DOM.

import type { Kind } from "./graph";
import { fmt, headName } from "./svg";

/** One pair of heads: x its composition score (minus the baseline), y its path-patching effect. */
export interface PairPoint {
  l1: number;
  h1: number;
  l2: number;
  h2: number;
  x: number;
  y: number;
}

/**
 * The pairs of kind `k` (0 Q, 1 K, 2 V) measured by both: `composition` and
 * `patching` are float32 [3, L, H, L, H]; pairs where either is NaN (a kind not
 * run, a head that is not earlier) are left out.
 */
export function pairPoints(composition: ArrayLike<number>, patching: ArrayLike<number>, L: number, H: number, k: number, baseline: number): PairPoint[] {
  const out: PairPoint[] = [];
  for (let l1 = 0; l1 < L; l1++)
    for (let h1 = 0; h1 < H; h1++)
      for (let l2 = l1 + 1; l2 < L; l2++)
        for (let h2 = 0; h2 < H; h2++) {
          const i = (((k * L + l1) * H + h1) * L + l2) * H + h2;
          const x = (composition[i] as number) - baseline;
          const y = patching[i] as number;
          if (Number.isFinite(x) && Number.isFinite(y)) out.push({ l1, h1, l2, h2, x, y });
        }
  return out;
}

/** Whether kind `k` has any path-patching value (a kind not run is all NaN). */
export function kindMeasured(patching: ArrayLike<number>, L: number, H: number, k: number): boolean {
  const size = L * H * L * H;
  for (let i = k * size; i < (k + 1) * size; i++) if (Number.isFinite(patching[i] as number)) return true;
  return false;
}

/** `L0H11 → L1H5`. */
export function pairName(p: Pick<PairPoint, "l1" | "h1" | "l2" | "h2">): string {
  return `${headName(p.l1, p.h1)} → ${headName(p.l2, p.h2)}`;
}

/** What the axes say: the kind's composition (minus the baseline when there is one) and the metric via the kind's input. */
export function axisTitles(kind: Kind, metric: string, baseline: number): { x: string; y: string } {
  const via = kind.toLowerCase();
  return {
    x: baseline !== 0 ? `${kind}-composition score − random baseline (${fmt(baseline, 3)})` : `${kind}-composition score`,
    y: `path patching via ${via}: ${metric || "effect"}`,
  };
}

/** A pair in words, with both numbers: "L0H11 → L1H5: K-composition 0.131, via k 0.354". */
export function pairText(p: PairPoint, kind: Kind, baseline: number): string {
  const above = baseline !== 0 ? " above baseline" : "";
  return `${pairName(p)}: ${kind}-composition ${fmt(p.x, 3)}${above}, path patching via ${kind.toLowerCase()} ${fmt(p.y, 3)}`;
}

/** A value range holding every value and 0 (the lines at 0 split the quadrants), padded by 6 % each side. */
export function paddedDomain(values: readonly number[]): [number, number] {
  let lo = 0;
  let hi = 0;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === hi) return [lo - 1, hi + 1];
  const pad = (hi - lo) * 0.06;
  return [lo - pad, hi + pad];
}

/** The points that carry a label: the `n` with the largest effect (ties by composition), then the selected pair. */
export function labelledPoints(points: readonly PairPoint[], n: number, selected: readonly number[] | null): PairPoint[] {
  const top = [...points].sort((a, b) => b.y - a.y || b.x - a.x).slice(0, Math.max(0, n));
  const sel = selected && selected.length === 4 ? points.find((p) => p.l1 === selected[0] && p.h1 === selected[1] && p.l2 === selected[2] && p.h2 === selected[3]) : undefined;
  if (sel && !top.includes(sel)) top.push(sel);
  return top;
}

/** Pearson's correlation of x and y over the points (NaN under three points or with no spread). */
export function pearson(points: readonly PairPoint[]): number {
  const n = points.length;
  if (n < 3) return Number.NaN;
  let mx = 0;
  let my = 0;
  for (const p of points) {
    mx += p.x / n;
    my += p.y / n;
  }
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (const p of points) {
    sxy += (p.x - mx) * (p.y - my);
    sxx += (p.x - mx) ** 2;
    syy += (p.y - my) ** 2;
  }
  return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : Number.NaN;
}
