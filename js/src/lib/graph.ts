// Composition scores as a layered graph: which edges to draw and where
// (pure functions, testable without a DOM).

/** Composition kinds in the order of the `scores` axis. */
export const KINDS = ["Q", "K", "V"] as const;
export type Kind = (typeof KINDS)[number];

/** Colour and dash of each kind (Okabe–Ito colours, dashes for readers who cannot tell them apart). */
export const KIND_STYLE: Record<Kind, { colour: string; dash: string | null; label: string }> = {
  // Not blue: the heatmaps beside the graph use blue for "below the random baseline".
  Q: { colour: "#CC79A7", dash: null, label: "Q-composition (feeds queries)" },
  K: { colour: "#D55E00", dash: "7 3", label: "K-composition (feeds keys)" },
  V: { colour: "#009E73", dash: "2 3", label: "V-composition (feeds values)" },
};

export interface CompData {
  nLayers: number;
  nHeads: number;
  /** float32 [3, L, H, L, H]. */
  scores: Float32Array;
  baseline: number;
}

export interface Edge {
  kind: Kind;
  l1: number;
  h1: number;
  l2: number;
  h2: number;
  value: number;
}

/** Score of kind `k` from (l1, h1) into (l2, h2), minus the baseline when `subtract` (NaN unless l1 < l2). */
export function compValue(d: CompData, k: number, l1: number, h1: number, l2: number, h2: number, subtract: boolean): number {
  if (!(l1 < l2)) return Number.NaN;
  const { nLayers: L, nHeads: H } = d;
  const v = d.scores[(((k * L + l1) * H + h1) * L + l2) * H + h2] as number;
  return subtract ? v - d.baseline : v;
}

/** The graph's order: strongest first, ties by later head, earlier head, then kind. */
export function edgeOrder(a: Edge, b: Edge): number {
  return b.value - a.value || a.l2 - b.l2 || a.h2 - b.h2 || a.l1 - b.l1 || a.h1 - b.h1 || KINDS.indexOf(a.kind) - KINDS.indexOf(b.kind);
}

/**
 * Call `visit` with every (kind, earlier head, later head) pair's value, in a fixed order. No object
 * per pair: 32 × 32 heads have 1.5 million edges over three kinds.
 */
function forEachPair(
  d: CompData,
  kinds: readonly Kind[],
  subtract: boolean,
  visit: (kind: Kind, l1: number, h1: number, l2: number, h2: number, value: number) => void,
): void {
  for (const kind of kinds) {
    const k = KINDS.indexOf(kind);
    for (let l2 = 1; l2 < d.nLayers; l2++)
      for (let h2 = 0; h2 < d.nHeads; h2++)
        for (let l1 = 0; l1 < l2; l1++)
          for (let h1 = 0; h1 < d.nHeads; h1++) visit(kind, l1, h1, l2, h2, compValue(d, k, l1, h1, l2, h2, subtract));
  }
}

/** Every defined edge of the given kinds, strongest first. */
export function allEdges(d: CompData, kinds: readonly Kind[], subtract: boolean): Edge[] {
  const out: Edge[] = [];
  forEachPair(d, kinds, subtract, (kind, l1, h1, l2, h2, value) => {
    if (Number.isFinite(value)) out.push({ kind, l1, h1, l2, h2, value });
  });
  return out.sort(edgeOrder);
}

/**
 * The `n` strongest edges with a positive value of at least `min` (the graph draws these), in
 * `allEdges` order. One pass keeping the best `n` so far: only the few kept become objects.
 */
export function strongestEdges(d: CompData, kinds: readonly Kind[], n: number, subtract: boolean, min = 0): Edge[] {
  const want = Math.max(0, Math.floor(n));
  const top: Edge[] = [];
  if (want === 0) return top;
  forEachPair(d, kinds, subtract, (kind, l1, h1, l2, h2, value) => {
    if (!(value > 0) || !(value >= min)) return;
    const last = top[top.length - 1];
    if (top.length === want && last !== undefined && value < last.value) return;
    const e: Edge = { kind, l1, h1, l2, h2, value };
    if (top.length === want && last !== undefined && edgeOrder(e, last) >= 0) return;
    let lo = 0;
    let hi = top.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (edgeOrder(top[mid] as Edge, e) <= 0) lo = mid + 1;
      else hi = mid;
    }
    top.splice(lo, 0, e);
    if (top.length > want) top.pop();
  });
  return top;
}

/** How many edges of `kinds` have a positive value of at least `min` (those the threshold lets through). */
export function countEdgesAbove(d: CompData, kinds: readonly Kind[], subtract: boolean, min = 0): number {
  let count = 0;
  forEachPair(d, kinds, subtract, (_kind, _l1, _h1, _l2, _h2, value) => {
    if (value > 0 && value >= min) count++;
  });
  return count;
}

/**
 * The smallest value an edge must reach to be drawn, in the units shown: a raw-score `threshold` (0: none) minus
 * the baseline when the view subtracts it; never below 0 (only edges above the baseline are drawn).
 */
export function edgeFloor(threshold: number, baseline: number, subtract: boolean): number {
  if (!(threshold > 0)) return 0;
  return Math.max(0, subtract ? threshold - baseline : threshold);
}

/** `l1.h1-l2.h2`, the `data-cw-edge` value of an edge. */
export function edgeId(e: Pick<Edge, "l1" | "h1" | "l2" | "h2">): string {
  return `${e.l1}.${e.h1}-${e.l2}.${e.h2}`;
}

/** Parse `l1.h1-l2.h2`; null when malformed. */
export function parseEdgeId(id: string): [number, number, number, number] | null {
  const m = /^(\d+)\.(\d+)-(\d+)\.(\d+)$/.exec(id);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])] : null;
}

/** A valid selected edge `[l1, h1, l2, h2]` from a trait value, or null. */
export function edgeOr(value: unknown, nLayers: number, nHeads: number): [number, number, number, number] | null {
  if (!Array.isArray(value) || value.length !== 4 || !value.every((v) => Number.isInteger(v))) return null;
  const [l1, h1, l2, h2] = value as number[];
  if (!(0 <= (l1 as number) && (l1 as number) < (l2 as number) && (l2 as number) < nLayers)) return null;
  if (!(0 <= (h1 as number) && (h1 as number) < nHeads && 0 <= (h2 as number) && (h2 as number) < nHeads)) return null;
  return [l1, h1, l2, h2] as [number, number, number, number];
}

/**
 * The selected edge as drawn: kept only while it ends at the selected head, so that a head chosen in
 * another view clears an edge into some other head instead of leaving it outlined beside the new head.
 */
export function edgeOfSelection(
  edge: [number, number, number, number] | null,
  layer: number,
  head: number,
): [number, number, number, number] | null {
  return edge !== null && edge[2] === layer && edge[3] === head ? edge : null;
}

export interface Layout {
  width: number;
  height: number;
  /** Centre of node (layer, head). */
  node(layer: number, head: number): { x: number; y: number };
  radius: number;
}

/** Layers as columns left to right, heads top to bottom. */
export function layeredLayout(nLayers: number, nHeads: number, width: number, opts: { top?: number; rowGap?: number; side?: number } = {}): Layout {
  const top = opts.top ?? 30;
  const side = opts.side ?? 34;
  const rowGap = opts.rowGap ?? (nHeads > 16 ? 16 : 26);
  const radius = Math.min(10, rowGap * 0.4);
  const height = top + Math.max(1, nHeads) * rowGap + 8;
  const span = Math.max(1, nLayers - 1);
  return {
    width,
    height,
    radius,
    node: (layer, head) => ({ x: nLayers === 1 ? width / 2 : side + ((width - 2 * side) * layer) / span, y: top + rowGap * (head + 0.5) }),
  };
}

/** Cubic Bézier from node a (right side) to node b (left side), bent by `bend` pixels. */
export function edgePath(a: { x: number; y: number }, b: { x: number; y: number }, radius: number, bend = 0): string {
  const x0 = a.x + radius;
  const x1 = b.x - radius;
  const dx = (x1 - x0) / 2;
  const r = (v: number) => Math.round(v * 10) / 10;
  return `M${r(x0)},${r(a.y)} C${r(x0 + dx)},${r(a.y + bend)} ${r(x1 - dx)},${r(b.y + bend)} ${r(x1)},${r(b.y)}`;
}

/** Stroke width of an edge of `value` when the strongest drawn edge is `max`. */
export function edgeWidth(value: number, max: number): number {
  if (!(max > 0) || !(value > 0)) return 1;
  return 1 + 5 * Math.min(1, value / max);
}

/** Points along the edge drawn by `edgePath(a, b, radius, bend)` (the same cubic Bézier), `steps` segments. */
export function edgePoints(a: { x: number; y: number }, b: { x: number; y: number }, radius: number, bend = 0, steps = 32): { x: number; y: number }[] {
  const x0 = a.x + radius;
  const x1 = b.x - radius;
  const dx = (x1 - x0) / 2;
  const p = [
    [x0, a.y],
    [x0 + dx, a.y + bend],
    [x1 - dx, b.y + bend],
    [x1, b.y],
  ] as const;
  const out: { x: number; y: number }[] = [];
  for (let i = 0; i <= steps; i++) {
    const t = i / steps;
    const u = 1 - t;
    const w = [u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t];
    out.push({
      x: w.reduce((s, k, j) => s + k * (p[j] as readonly [number, number])[0], 0),
      y: w.reduce((s, k, j) => s + k * (p[j] as readonly [number, number])[1], 0),
    });
  }
  return out;
}

/** Distance from point `p` to the segment `a`–`b`. */
export function segmentDistance(p: { x: number; y: number }, a: { x: number; y: number }, b: { x: number; y: number }): number {
  const vx = b.x - a.x;
  const vy = b.y - a.y;
  const len2 = vx * vx + vy * vy;
  const t = len2 > 0 ? Math.max(0, Math.min(1, ((p.x - a.x) * vx + (p.y - a.y) * vy) / len2)) : 0;
  return Math.hypot(p.x - (a.x + t * vx), p.y - (a.y + t * vy));
}

/** Distance from `p` to a polyline. */
export function polylineDistance(p: { x: number; y: number }, points: readonly { x: number; y: number }[]): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 1; i < points.length; i++) best = Math.min(best, segmentDistance(p, points[i - 1] as { x: number; y: number }, points[i] as { x: number; y: number }));
  if (points.length === 1) best = Math.hypot(p.x - (points[0] as { x: number }).x, p.y - (points[0] as { y: number }).y);
  return best;
}

/**
 * The index of the edge nearest to `p` (by distance to its drawn curve, so a
 * click near a crossing picks the edge the pointer is actually closer to), or
 * -1 when none is within `within` px.
 */
export function nearestEdge(p: { x: number; y: number }, curves: readonly (readonly { x: number; y: number }[])[], within = 8): number {
  let best = -1;
  let bestD = within;
  curves.forEach((pts, i) => {
    const d = polylineDistance(p, pts);
    if (d <= bestD) {
      best = i;
      bestD = d;
    }
  });
  return best;
}

/** Opacity of an edge of `value` when the strongest drawn edge is `max`: strength alone decides (never the selection). */
export function edgeOpacity(value: number, max: number): number {
  if (!(max > 0) || !(value > 0)) return 0.35;
  return 0.35 + 0.6 * Math.min(1, value / max);
}

/** A dash pattern stretched with the line's width, so a thick dashed edge still reads as dashed. */
export function scaledDash(dash: string | null, width: number): string | null {
  if (dash === null) return null;
  const k = Math.max(1, width / 2);
  return dash
    .split(/\s+/)
    .map((v) => String(Math.round(Number(v) * k * 10) / 10))
    .join(" ");
}
