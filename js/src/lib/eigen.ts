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

/** A round mark a label must not cover (a dot, a selection ring), centre and radius in px. */
export interface Obstacle {
  x: number;
  y: number;
  r: number;
}

/** A label wanted next to a point: its size, how far from the point's centre it must stay, and whether it must be drawn. */
export interface LabelWish {
  x: number;
  y: number;
  width: number;
  height: number;
  /** Distance from the point's centre to the label (clear of its own dot or ring); default 7. */
  clear?: number;
  /** Drawn even when every spot collides (the selected head's label). */
  required?: boolean;
}

function boxesHit(a: LabelBox, b: LabelBox): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

function circleHits(c: Obstacle, b: LabelBox): boolean {
  const nx = Math.max(b.x, Math.min(c.x, b.x + b.width));
  const ny = Math.max(b.y, Math.min(c.y, b.y + b.height));
  return (nx - c.x) ** 2 + (ny - c.y) ** 2 < c.r * c.r;
}

/** Extra distances (px, beyond `clear`) tried for a label: the first two for every label, all for a required one. */
const RINGS = [0, 8, 20, 34, 50];

/**
 * Candidate boxes around a point, nearest first: right, left, above, below,
 * diagonals; then the same farther out (a required label looks farther, for a
 * spot clear of a crowd, and is joined to its point by a leader line).
 */
function spots(p: LabelWish): LabelBox[] {
  const out: LabelBox[] = [];
  const { width: w, height: h } = p;
  for (const extra of p.required ? RINGS : RINGS.slice(0, 2)) {
    const g = (p.clear ?? 7) + extra;
    const d = g * Math.SQRT1_2;
    out.push(
      { x: p.x + d, y: p.y - d - h, width: w, height: h }, // right-above
      { x: p.x + g, y: p.y - h / 2, width: w, height: h }, // right
      { x: p.x + d, y: p.y + d, width: w, height: h }, // right-below
      { x: p.x - d - w, y: p.y - d - h, width: w, height: h }, // left-above
      { x: p.x - g - w, y: p.y - h / 2, width: w, height: h }, // left
      { x: p.x - d - w, y: p.y + d, width: w, height: h }, // left-below
      { x: p.x - w / 2, y: p.y - g - h, width: w, height: h }, // above
      { x: p.x - w / 2, y: p.y + g, width: w, height: h }, // below
    );
  }
  return out;
}

/**
 * Greedy label placement that keeps labels off every dot and ring and off
 * each other: for each wish (in order, so put the selected head first) the
 * first spot around its point that overlaps no placed label, no obstacle and
 * stays inside `bounds`. A label with no free spot is left out (null: the head
 * is still named by its hover label), unless `required`, when it takes the
 * spot that covers fewest dots and no other label where it can.
 */
export function placeLabels(
  wishes: readonly LabelWish[],
  obstacles: readonly Obstacle[] = [],
  bounds: LabelBox | null = null,
): (LabelBox | null)[] {
  const placed: LabelBox[] = [];
  const inside = (b: LabelBox) => bounds === null || (b.x >= bounds.x && b.y >= bounds.y && b.x + b.width <= bounds.x + bounds.width && b.y + b.height <= bounds.y + bounds.height);
  return wishes.map((p) => {
    const candidates = spots(p);
    const cost = (b: LabelBox) =>
      (inside(b) ? 0 : 1000) + 100 * placed.filter((q) => boxesHit(b, q)).length + obstacles.filter((o) => circleHits(o, b)).length;
    let best: LabelBox | null = null;
    let bestCost = Number.POSITIVE_INFINITY;
    for (const b of candidates) {
      const c = cost(b);
      if (c === 0) {
        best = b;
        bestCost = 0;
        break;
      }
      if (c < bestCost) {
        best = b;
        bestCost = c;
      }
    }
    if (best === null || (bestCost > 0 && !p.required)) return null;
    placed.push(best);
    return best;
  });
}

/**
 * Rows of a one-dimensional strip of dots (heads with no vertical value):
 * each dot goes to the first row where it keeps `gap` px from every dot
 * already there, so no two dots hide each other. Returns a row per dot.
 */
export function stripRows(xs: readonly number[], gap: number): number[] {
  const order = xs.map((x, i) => [x, i] as const).sort((a, b) => a[0] - b[0]);
  const last: number[] = [];
  const rows = new Array<number>(xs.length).fill(0);
  for (const [x, i] of order) {
    let k = last.findIndex((prev) => x - prev >= gap);
    if (k < 0) {
      k = last.length;
      last.push(x);
    } else last[k] = x;
    rows[i] = k;
  }
  return rows;
}

/** A head name that exists in a model of `nLayers` × `nHeads` (its last head), for a search box's placeholder. */
export function exampleHeadName(nLayers: number, nHeads: number): string {
  return `L${Math.max(0, nLayers - 1)}H${Math.max(0, nHeads - 1)}`;
}

/** A head named by the user: "L3H7", "l3 h7", "3.7", "3,7" or "3 7". */
export type HeadQuery = { layer: number; head: number } | { error: string };

/** Read a head's name typed into a search box, checked against the model's `nLayers` × `nHeads`. */
export function parseHeadName(text: string, nLayers: number, nHeads: number): HeadQuery {
  const m = /^\s*(?:l(?:ayer)?\s*)?(\d+)\s*(?:[.,:\s]\s*|\s*h(?:ead)?\s*)(?:h(?:ead)?\s*)?(\d+)\s*$/i.exec(text);
  if (!m) return { error: `“${text.trim().slice(0, 24)}” is not a head name; type it as L3H7 (layer 3, head 7)` };
  const layer = Number(m[1]);
  const head = Number(m[2]);
  if (layer >= nLayers) return { error: `L${layer}H${head}: this model has layers 0–${nLayers - 1}` };
  if (head >= nHeads) return { error: `L${layer}H${head}: this model has heads 0–${nHeads - 1} in each layer` };
  return { layer, head };
}

/** Point radius for `count` points: smaller as the plot fills, so a crowd stays readable as a cloud. */
export function pointRadius(count: number): number {
  return count > 256 ? 3.5 : count > 64 ? 4.5 : 5.5;
}

/** A point of the scatter as the click handler sees it: its head id ("l.h") and its position in pixels. */
export interface PlacedHead {
  id: string;
  x: number;
  y: number;
}

/** Heads drawn within `radius` pixels of `at` (itself included), in head order: one spot, several heads. */
export function coincident(points: readonly PlacedHead[], at: PlacedHead, radius = 3): string[] {
  const order = (id: string) => id.split(".").map(Number) as [number, number];
  return points
    .filter((p) => Math.hypot(p.x - at.x, p.y - at.y) <= radius)
    .map((p) => p.id)
    .sort((a, b) => order(a)[0] - order(b)[0] || order(a)[1] - order(b)[1]);
}

/**
 * The head a click on `clicked` selects: itself, or, when several heads share its spot and one of
 * them is selected, the next of them (clicking again cycles through heads drawn on one point).
 */
export function headToSelect(points: readonly PlacedHead[], clicked: PlacedHead, selected: string): string {
  const here = coincident(points, clicked);
  const at = here.indexOf(selected);
  return at < 0 || here.length < 2 ? clicked.id : (here[(at + 1) % here.length] as string);
}
