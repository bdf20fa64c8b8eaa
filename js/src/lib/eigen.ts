// Eigenvalue-scatter data as the view reads it: decoded arrays, each head's
// point, scores recomputed from eigenvalues, and label placement. No DOM.

import type { NDArray } from "./arrays";

export const CIRCUITS = ["ov", "qk", "qk_kcomp"] as const;
/** Detectors in the order of the `detectors` axis. */
export const DETECTORS = [
  { key: "previous_token", label: "previous token" },
  { key: "induction", label: "induction" },
  { key: "duplicate_token", label: "duplicate token" },
] as const;

export const METHOD_LABELS: Record<string, string> = { eigen: "eigenvalues", diagonal: "diagonal", topk: "top-k" };

export interface EigenData {
  nMethods: number;
  nLayers: number;
  nHeads: number;
  dHead: number;
  scores: NDArray;
  eigenvalues: NDArray;
  kcompSource: NDArray;
  detectors: NDArray;
}

/** Check and wrap the decoded arrays. */
export function toEigenData(scores: NDArray, eigenvalues: NDArray, kcompSource: NDArray, detectors: NDArray): EigenData {
  const [nMethods = 0, nCircuits = 0, nLayers = 0, nHeads = 0] = scores.shape;
  const dHead = eigenvalues.shape[3] ?? 0;
  if (scores.shape.length !== 4 || nCircuits !== 3) throw new Error(`circuitwidgets: scores of shape [${scores.shape.join(", ")}] are not [methods, 3, L, H]`);
  const want = (a: NDArray, shape: number[], name: string) => {
    if (a.shape.length !== shape.length || a.shape.some((d, i) => d !== shape[i]))
      throw new Error(`circuitwidgets: ${name} of shape [${a.shape.join(", ")}], expected [${shape.join(", ")}]`);
  };
  want(eigenvalues, [3, nLayers, nHeads, dHead, 2], "eigenvalues");
  want(kcompSource, [nLayers, nHeads, 2], "kcomp_source");
  want(detectors, [3, nLayers, nHeads], "detectors");
  return { nMethods, nLayers, nHeads, dHead, scores, eigenvalues, kcompSource, detectors };
}

/** Score of head (l, h) for method index m and circuit index c (NaN when undefined). */
export function scoreAt(d: EigenData, m: number, c: number, l: number, h: number): number {
  return d.scores.data[((m * 3 + c) * d.nLayers + l) * d.nHeads + h] as number;
}

/** Detector score k of head (l, h). */
export function detectorAt(d: EigenData, k: number, l: number, h: number): number {
  return d.detectors.data[(k * d.nLayers + l) * d.nHeads + h] as number;
}

/** Eigenvalues (re, im pairs) of head (l, h) in circuit c; NaN pairs are dropped. */
export function headEigenvalues(d: EigenData, c: number, l: number, h: number): [number, number][] {
  const base = ((c * d.nLayers + l) * d.nHeads + h) * d.dHead * 2;
  const out: [number, number][] = [];
  for (let i = 0; i < d.dHead; i++) {
    const re = d.eigenvalues.data[base + 2 * i] as number;
    const im = d.eigenvalues.data[base + 2 * i + 1] as number;
    if (Number.isFinite(re) && Number.isFinite(im)) out.push([re, im]);
  }
  return out;
}

export interface ScatterPoint {
  layer: number;
  head: number;
  x: number;
  /** NaN when the head has no value on the vertical axis (layer 0 for K-composition). */
  y: number;
}

/** Points of the scatter: x the OV score, y the chosen QK score, for method index `m`. */
export function scatterPoints(d: EigenData, m: number, qkCircuit: string): ScatterPoint[] {
  const c = qkCircuit === "qk_kcomp" ? 2 : 1;
  const out: ScatterPoint[] = [];
  for (let l = 0; l < d.nLayers; l++)
    for (let h = 0; h < d.nHeads; h++) out.push({ layer: l, head: h, x: scoreAt(d, m, 0, l, h), y: scoreAt(d, m, c, l, h) });
  return out;
}

/** Axis range of a score definition: eigen scores lie in [−1, 1], the fractions in [0, 1]. */
export function scoreDomain(method: string): [number, number] {
  return method === "eigen" ? [-1, 1] : [0, 1];
}

/** Σλ / Σ|λ| of eigenvalue pairs (NaN when all are zero). */
export function eigenScore(eigs: readonly [number, number][]): number {
  let sum = 0;
  let mag = 0;
  for (const [re, im] of eigs) {
    sum += re;
    mag += Math.hypot(re, im);
  }
  return mag > 0 ? sum / mag : Number.NaN;
}

export interface LabelBox {
  x: number;
  y: number;
  width: number;
  height: number;
}

/**
 * Greedy label placement: for each point (in order) the first of four spots
 * around it (right-above, right-below, left-above, left-below) whose box
 * overlaps no label placed before; the first spot when all overlap.
 */
export function placeLabels(points: readonly { x: number; y: number; width: number; height: number }[], gap = 7): LabelBox[] {
  const placed: LabelBox[] = [];
  const hit = (a: LabelBox, b: LabelBox) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  for (const p of points) {
    const spots: LabelBox[] = [
      { x: p.x + gap, y: p.y - gap - p.height, width: p.width, height: p.height },
      { x: p.x + gap, y: p.y + gap, width: p.width, height: p.height },
      { x: p.x - gap - p.width, y: p.y - gap - p.height, width: p.width, height: p.height },
      { x: p.x - gap - p.width, y: p.y + gap, width: p.width, height: p.height },
    ];
    placed.push(spots.find((s) => !placed.some((q) => hit(s, q))) ?? (spots[0] as LabelBox));
  }
  return placed;
}
