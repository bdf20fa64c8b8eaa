// Where the composition graph puts its heads. A small model shows every head
// (layers as columns, heads top to bottom); a model whose heads would not fit
// without touching (32 columns of 32 circles at 32 × 32) shows only the heads
// its drawn edges join, plus the selected head, in columns of the layers they
// belong to. Either way no two circles and no two column labels overlap.
// Pure functions, testable without a DOM.

import { layeredLayout } from "./graph";

export interface GraphNode {
  layer: number;
  head: number;
  x: number;
  y: number;
}

export interface GraphLayout {
  width: number;
  height: number;
  radius: number;
  /** Every head drawn. */
  nodes: GraphNode[];
  /** A column per layer drawn: its layer and centre. */
  columns: { layer: number; x: number }[];
  /** Whether every head of the model is drawn (else only the heads of the drawn edges). */
  complete: boolean;
  /** Centre of head (layer, head), or null when it is not drawn. */
  node(layer: number, head: number): { x: number; y: number } | null;
}

/** Room a column needs (px): its circles, and its label ("layer 11" in the full layout, "L31" in the compact one). */
const FULL_COLUMN = 64;
const COMPACT_COLUMN = 56;
/** Most heads the full layout draws; beyond, only the heads that edges join. */
const FULL_MAX_HEADS = 256;

/** The full layout's width for a model of `nLayers` (as before: 180 px a layer, 280–560 px). */
export function fullWidth(nLayers: number): number {
  return Math.max(280, Math.min(560, 180 * nLayers));
}

/** Whether every head fits: columns at least `FULL_COLUMN` px apart and not too many circles. */
export function fitsFull(nLayers: number, nHeads: number): boolean {
  const side = 40;
  const gap = nLayers > 1 ? (fullWidth(nLayers) - 2 * side) / (nLayers - 1) : Number.POSITIVE_INFINITY;
  return gap >= FULL_COLUMN && nLayers * nHeads <= FULL_MAX_HEADS;
}

/** Every head of the model, layers as columns. */
export function fullLayout(nLayers: number, nHeads: number): GraphLayout {
  const width = fullWidth(nLayers);
  const base = layeredLayout(nLayers, nHeads, width, { rowGap: nHeads > 16 ? 18 : 34, side: 40 });
  const nodes: GraphNode[] = [];
  for (let l = 0; l < nLayers; l++) for (let h = 0; h < nHeads; h++) nodes.push({ layer: l, head: h, ...base.node(l, h) });
  return {
    width,
    height: base.height,
    radius: base.radius,
    nodes,
    columns: Array.from({ length: nLayers }, (_, l) => ({ layer: l, x: base.node(l, 0).x })),
    complete: true,
    node: (l, h) => (l >= 0 && l < nLayers && h >= 0 && h < nHeads ? base.node(l, h) : null),
  };
}

/**
 * Only `heads` (those the drawn edges join, and the selected head): a column
 * per layer among them, in layer order, at least `COMPACT_COLUMN` px apart;
 * each column's heads in head order, centred vertically, `rowGap` px apart.
 */
export function compactLayout(heads: readonly { layer: number; head: number }[], opts: { minWidth?: number; maxWidth?: number; top?: number; side?: number; rowGap?: number } = {}): GraphLayout {
  const top = opts.top ?? 30;
  const side = opts.side ?? 32;
  const rowGap = opts.rowGap ?? 28;
  const radius = 10;
  const byLayer = new Map<number, Set<number>>();
  for (const { layer, head } of heads) {
    if (!byLayer.has(layer)) byLayer.set(layer, new Set());
    byLayer.get(layer)?.add(head);
  }
  const layers = [...byLayer.keys()].sort((a, b) => a - b);
  const tallest = Math.max(1, ...[...byLayer.values()].map((s) => s.size));
  const span = Math.max(0, layers.length - 1);
  const width = Math.max(opts.minWidth ?? 280, Math.min(opts.maxWidth ?? 560, 2 * side + span * 120), 2 * side + span * COMPACT_COLUMN);
  const step = span > 0 ? (width - 2 * side) / span : 0;
  const nodes: GraphNode[] = [];
  const columns = layers.map((layer, i) => {
    const x = span > 0 ? side + i * step : width / 2;
    const column = [...(byLayer.get(layer) ?? [])].sort((a, b) => a - b);
    const offset = (tallest - column.length) / 2;
    column.forEach((head, j) => nodes.push({ layer, head, x, y: top + rowGap * (offset + j + 0.5) }));
    return { layer, x };
  });
  const index = new Map(nodes.map((n) => [`${n.layer}.${n.head}`, n]));
  return {
    width,
    height: top + tallest * rowGap + 8,
    radius,
    nodes,
    columns,
    complete: false,
    node: (l, h) => {
      const n = index.get(`${l}.${h}`);
      return n ? { x: n.x, y: n.y } : null;
    },
  };
}

/** The layout of a graph drawing `edges` with `selected` chosen: every head when they fit, else the compact one. */
export function graphLayout(nLayers: number, nHeads: number, edges: readonly { l1: number; h1: number; l2: number; h2: number }[], selected: { layer: number; head: number }): GraphLayout {
  if (fitsFull(nLayers, nHeads)) return fullLayout(nLayers, nHeads);
  const heads = [selected, ...edges.flatMap((e) => [{ layer: e.l1, head: e.h1 }, { layer: e.l2, head: e.h2 }])];
  return compactLayout(heads);
}
