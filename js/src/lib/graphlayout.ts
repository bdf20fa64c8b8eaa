// Where the composition graph puts its heads. A small model shows every head
// (layers as columns, heads top to bottom); a model whose heads would not fit
// without touching (32 columns of 32 circles at 32 × 32) shows only the heads
// its drawn edges join, plus the selected head, in columns of the layers they
// belong to. Either way no two circles and no two column labels overlap.
// Pure functions, testable without a DOM.

import { edgePoints, layeredLayout, polylineDistance } from "./graph";

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
const COMPACT_COLUMN = 42;
/** Most heads the full layout draws; beyond, only the heads that edges join. */
const FULL_MAX_HEADS = 256;
/** Rows the compact layout may use at least, for its edges' lanes. */
const MIN_ROWS = 12;

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

/** An edge as the layout sees it: from an earlier head to a later one. */
export interface LayoutEdge {
  l1: number;
  h1: number;
  l2: number;
  h2: number;
}

/**
 * Only `heads` (those the drawn edges join, and the selected head): a column
 * per layer among them, in layer order, at least `COMPACT_COLUMN` px apart.
 * Heads take rows so that no edge passes behind a head it does not join.
 * Edges run in lanes: an edge leaves its earlier head along that head's row,
 * which no head in the columns it crosses may take, and its later head takes
 * the same row where it can (a straight edge). Heads are placed layer by
 * layer, each in the first such row from which its incoming edges clear every
 * head between their ends (all of which are placed by then); where no row
 * does, the one passing fewest heads.
 */
export function compactLayout(
  heads: readonly { layer: number; head: number }[],
  edges: readonly LayoutEdge[] = [],
  opts: { minWidth?: number; maxWidth?: number; top?: number; side?: number; rowGap?: number } = {},
): GraphLayout {
  const top = opts.top ?? 30;
  const side = opts.side ?? 32;
  const rowGap = opts.rowGap ?? 28;
  const radius = 10;
  const key = (l: number, h: number) => `${l}.${h}`;
  const unique = new Map<string, { layer: number; head: number }>();
  for (const h of heads) unique.set(key(h.layer, h.head), { layer: h.layer, head: h.head });
  for (const e of edges) {
    unique.set(key(e.l1, e.h1), { layer: e.l1, head: e.h1 });
    unique.set(key(e.l2, e.h2), { layer: e.l2, head: e.h2 });
  }
  const ordered = [...unique.values()].sort((a, b) => a.layer - b.layer || a.head - b.head);
  const layers = [...new Set(ordered.map((h) => h.layer))];
  const span = Math.max(0, layers.length - 1);
  const width = Math.max(opts.minWidth ?? 280, Math.min(opts.maxWidth ?? 560, 2 * side + span * 120), 2 * side + span * COMPACT_COLUMN);
  const step = span > 0 ? (width - 2 * side) / span : 0;
  const columnX = new Map(layers.map((layer, i) => [layer, span > 0 ? side + i * step : width / 2]));
  const rowY = (r: number) => top + rowGap * (r + 0.5);
  const placed = new Map<string, GraphNode & { row: number }>();
  const taken = new Map<number, Set<number>>(); // layer → rows used
  const clearance = radius + 8; // room for the ±6 px bends of the three kinds
  // rows searched: room for lanes, but a bounded height (48 long edges could ask for 90 rows)
  const tallest = Math.max(1, ...layers.map((l) => ordered.filter((h) => h.layer === l).length));
  const maxRows = Math.max(MIN_ROWS, 2 * tallest + 4);
  /** Heads an edge from `s` to (x, y) would pass behind. */
  const passes = (s: GraphNode, x: number, y: number): number => {
    const curve = edgePoints(s, { x, y }, radius, 0, 24);
    let n = 0;
    for (const m of placed.values()) {
      if (m.x <= s.x || m.x >= x || m.y < Math.min(s.y, y) - clearance || m.y > Math.max(s.y, y) + clearance) continue;
      if (polylineDistance(m, curve) < clearance) n++;
    }
    return n;
  };
  const incomingOf = (h: { layer: number; head: number }) =>
    edges
      .filter((e) => e.l2 === h.layer && e.h2 === h.head)
      .map((e) => placed.get(key(e.l1, e.h1)))
      .filter((s): s is GraphNode & { row: number } => s !== undefined);
  // within a layer, heads continuing the longest lanes first, then those that end no lane
  const reach = (h: { layer: number; head: number }) => Math.max(0, ...edges.filter((e) => e.l2 === h.layer && e.h2 === h.head).map((e) => e.l2 - e.l1));
  const inLayer = (l: number) => ordered.filter((h) => h.layer === l).sort((a, b) => reach(b) - reach(a) || a.head - b.head);
  for (const h of layers.flatMap(inLayer)) {
    const x = columnX.get(h.layer) as number;
    const incoming = incomingOf(h);
    // lanes of edges that cross this column (from a placed earlier head to a later column)
    const lanes = new Set(edges.filter((e) => e.l1 < h.layer && e.l2 > h.layer).map((e) => placed.get(key(e.l1, e.h1))?.row));
    const used = taken.get(h.layer) ?? new Set<number>();
    // a head that ends no lane leaves the lane ends of its layer's other heads free
    const ends = incoming.length ? new Set<number>() : new Set(ordered.filter((o) => o.layer === h.layer && !placed.has(key(o.layer, o.head))).flatMap((o) => incomingOf(o).map((s) => s.row)));
    const candidates = [...new Set([...incoming.map((s) => s.row), ...Array.from({ length: maxRows }, (_, r) => r).filter((r) => !ends.has(r)), ...ends])];
    let best = -1;
    let bestCost = Number.POSITIVE_INFINITY;
    for (const r of candidates) {
      if (used.has(r) || lanes.has(r)) continue;
      const cost = incoming.reduce((sum, s) => sum + passes(s, x, rowY(r)), 0);
      if (cost < bestCost) {
        best = r;
        bestCost = cost;
      }
      if (cost === 0) break;
    }
    if (best < 0) best = Math.max(-1, ...used, ...[...lanes].filter((r) => r !== undefined)) + 1;
    used.add(best);
    taken.set(h.layer, used);
    placed.set(key(h.layer, h.head), { layer: h.layer, head: h.head, x, y: rowY(best), row: best });
  }
  const nodes: GraphNode[] = [...placed.values()].map(({ layer, head, x, y }) => ({ layer, head, x, y }));
  const rows = Math.max(1, ...[...placed.values()].map((n) => n.row + 1));
  return {
    width,
    height: top + rows * rowGap + 8,
    radius,
    nodes,
    columns: layers.map((layer) => ({ layer, x: columnX.get(layer) as number })),
    complete: false,
    node: (l, h) => {
      const n = placed.get(key(l, h));
      return n ? { x: n.x, y: n.y } : null;
    },
  };
}

/** The layout of a graph drawing `edges` with `selected` chosen: every head when they fit, else the compact one. */
export function graphLayout(nLayers: number, nHeads: number, edges: readonly LayoutEdge[], selected: { layer: number; head: number }): GraphLayout {
  if (fitsFull(nLayers, nHeads)) return fullLayout(nLayers, nHeads);
  return compactLayout([selected], edges);
}
