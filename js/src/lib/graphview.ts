// The graph view's drawing logic (pure functions, testable without a DOM):
// which edges a circuit of `size` edges keeps, where each node goes, how an
// edge looks, and where the faithfulness curve's points and marker are.
//
// One layout for both kinds of graph: rows are layers (embeddings at the
// bottom, logits at the top); columns are positions when nodes are per
// position (attribution graphs), else heads, with a layer's MLP after its
// heads (component graphs). A head's q, k and v inputs are ports under it.

import { signColour } from "./colour";

export interface GraphNodes {
  kind: readonly string[];
  layer: ArrayLike<number>;
  pos: ArrayLike<number>;
  index: ArrayLike<number>;
}

export const INPUT_KINDS = new Set(["head_q", "head_k", "head_v"]);
const SOURCE_KINDS = new Set(["embedding", "error"]);
const SINK_KINDS = new Set(["logit"]);

/** Each node's component: a head's q/k/v input maps to its head's node, any other node to itself. */
export function componentOf(nodes: GraphNodes): Int32Array {
  const n = nodes.kind.length;
  const owner = new Int32Array(n);
  const heads = new Map<string, number>();
  const key = (i: number) => `${nodes.layer[i]}/${nodes.index[i]}/${nodes.pos[i]}`;
  for (let i = 0; i < n; i++) if (nodes.kind[i] === "head") heads.set(key(i), i);
  for (let i = 0; i < n; i++) owner[i] = INPUT_KINDS.has(nodes.kind[i] ?? "") ? (heads.get(key(i)) ?? i) : i;
  return owner;
}

/**
 * Which of the first `size` edges a circuit keeps: those on a path from a source
 * (embedding, error) to a logit through kept edges, as Python's `graphs.prune`.
 */
export function keptEdges(nodes: GraphNodes, src: ArrayLike<number>, dst: ArrayLike<number>, size: number): boolean[] {
  const n = nodes.kind.length;
  const count = Math.max(0, Math.min(size, src.length));
  const owner = componentOf(nodes);
  const from: number[] = [];
  const to: number[] = [];
  for (let e = 0; e < count; e++) {
    from.push(owner[src[e] as number] as number);
    to.push(owner[dst[e] as number] as number);
  }
  const reach = (a: number[], b: number[], starts: Set<string>): Uint8Array => {
    const seen = new Uint8Array(n);
    for (let i = 0; i < n; i++) if (starts.has(nodes.kind[i] ?? "")) seen[i] = 1;
    for (let changed = true; changed; ) {
      changed = false;
      for (let e = 0; e < a.length; e++) {
        if (seen[a[e] as number] && !seen[b[e] as number]) {
          seen[b[e] as number] = 1;
          changed = true;
        }
      }
    }
    return seen;
  };
  const forward = reach(from, to, SOURCE_KINDS);
  const backward = reach(to, from, SINK_KINDS);
  return from.map((f, e) => Boolean(forward[f]) && Boolean(backward[to[e] as number]));
}

export interface Placed {
  x: number;
  y: number;
  /** Radius of a node; 0 for a port (a head's input). */
  r: number;
}

export interface GraphLayout {
  width: number;
  height: number;
  nodes: Placed[];
  /** Row of each drawn layer: its layer (-1 embeddings) and y. */
  rows: { layer: number; y: number }[];
  /** Columns: their label and x. */
  columns: { label: string; x: number }[];
}

const PORT_OFFSET: Record<string, number> = { head_q: -1, head_k: 0, head_v: 1 };

/** Where every node goes in a `width`-wide figure (see the module comment). */
export function layoutGraph(nodes: GraphNodes, width: number, tokens: readonly string[] = []): GraphLayout {
  const n = nodes.kind.length;
  const perPosition = Array.from({ length: n }, (_, i) => (nodes.pos[i] as number) >= 0).some(Boolean);
  const layers = [...new Set(Array.from({ length: n }, (_, i) => nodes.layer[i] as number))].sort((a, b) => a - b);
  const columnOf = new Int32Array(n);
  let nCols = 1;
  if (perPosition) {
    nCols = Math.max(1, ...Array.from({ length: n }, (_, i) => (nodes.pos[i] as number) + 1));
    for (let i = 0; i < n; i++) columnOf[i] = Math.max(0, nodes.pos[i] as number);
  } else {
    const nHeads = Math.max(0, ...Array.from({ length: n }, (_, i) => ((nodes.kind[i] ?? "").startsWith("head") ? (nodes.index[i] as number) + 1 : 0)));
    const hasMlp = nodes.kind.includes("mlp");
    nCols = Math.max(1, nHeads + (hasMlp ? 1 : 0));
    for (let i = 0; i < n; i++) {
      const kind = nodes.kind[i] ?? "";
      columnOf[i] = kind.startsWith("head") ? (nodes.index[i] as number) : kind === "mlp" ? nHeads : -1; // -1: centred
    }
  }
  const left = 56;
  const colW = Math.max(perPosition ? 26 : 34, Math.min(80, (width - left - 16) / nCols));
  const r = Math.max(6, Math.min(perPosition ? 10 : 13, colW * 0.3));
  // nodes sharing a cell (features of one layer at one position) spread across it
  const cell = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    if (INPUT_KINDS.has(nodes.kind[i] ?? "")) continue;
    const key = `${nodes.layer[i]}/${columnOf[i]}`;
    cell.set(key, [...(cell.get(key) ?? []), i]);
  }
  // (per position, a crowded cell stacks its nodes in lines: rows grow to hold up to 4 of them)
  const perLineMax = Math.max(1, Math.floor((colW * 0.9) / (2.2 * r)));
  const crowd = Math.max(1, ...[...cell.values()].map((m) => m.length));
  const lines = perPosition ? Math.min(4, Math.ceil(crowd / perLineMax)) : 1;
  const rowH = perPosition ? Math.max(70, 34 + lines * 2.2 * r) : 86;
  const W = left + colW * nCols + 16;
  const logitsOnTop = perPosition && nodes.kind.includes("logit");
  const top = logitsOnTop ? 64 : 24; // (room for the logits' slanted tokens)
  const H = top + rowH * (layers.length - 1) + 44;
  const yOf = new Map(layers.map((layer, k) => [layer, top + rowH * (layers.length - 1 - k)]));
  const placed: Placed[] = new Array(n);
  for (const members of cell.values()) {
    if (perPosition && nodes.kind[members[0] as number] === "logit") {
      // logits: one line (each has its token above it), kept inside the figure
      const step = 2.2 * r;
      const half = ((members.length - 1) * step) / 2;
      const cx = Math.min(Math.max(left + colW * ((columnOf[members[0] as number] as number) + 0.5), left + half), W - 8 - half);
      members.forEach((i, k) => (placed[i] = { x: cx - half + k * step, y: yOf.get(nodes.layer[i] as number) ?? top, r }));
      continue;
    }
    const used = Math.min(lines, Math.ceil(members.length / perLineMax));
    const perLine = Math.ceil(members.length / used);
    members.forEach((i, k) => {
      const col = columnOf[i] as number;
      const cx = col < 0 ? left + (colW * nCols) / 2 : left + colW * (col + 0.5);
      const line = Math.floor(k / perLine);
      const inLine = Math.min(perLine, members.length - line * perLine);
      const spread = inLine > 1 ? ((k % perLine) - (inLine - 1) / 2) * Math.min(2.2 * r, (colW * 0.9) / inLine) : 0;
      const lift = (line - (used - 1) / 2) * 2.2 * r;
      placed[i] = { x: cx + spread, y: (yOf.get(nodes.layer[i] as number) ?? top) + lift, r: col < 0 ? r * 1.2 : r };
    });
  }
  const owner = componentOf(nodes);
  for (let i = 0; i < n; i++) {
    if (!INPUT_KINDS.has(nodes.kind[i] ?? "")) continue;
    const head = placed[owner[i] as number];
    const at = head && owner[i] !== i ? head : { x: left, y: top, r };
    placed[i] = { x: at.x + (PORT_OFFSET[nodes.kind[i] ?? ""] ?? 0) * at.r * 0.75, y: at.y + at.r + 3, r: 0 };
  }
  const rows = layers.map((layer) => ({ layer, y: yOf.get(layer) ?? top }));
  const columns = perPosition
    ? Array.from({ length: nCols }, (_, c) => ({ label: tokens[c] ?? String(c), x: left + colW * (c + 0.5) }))
    : Array.from({ length: nCols }, (_, c) => ({ label: c < nCols - (nodes.kind.includes("mlp") ? 1 : 0) ? `H${c}` : "MLP", x: left + colW * (c + 0.5) }));
  return { width: W, height: H, nodes: placed, rows, columns };
}

/** Stroke width of an edge of weight `w` when the largest drawn |weight| is `max` (0.6 … 6 px, by area). */
export function edgeWidth(w: number, max: number): number {
  if (!(max > 0) || !Number.isFinite(w)) return 0.6;
  return 0.6 + 5.4 * Math.sqrt(Math.min(1, Math.abs(w) / max));
}

/** Colour of an edge by its weight's sign, as every view colours a sign (colour.ts `signColour`). */
export function edgeColour(w: number): string {
  return signColour(w);
}

/** A curved path from a sender (above it) to a receiver (below it): out of the sender's top, into the receiver. */
export function edgePath(from: Placed, to: Placed): string {
  const x1 = from.x;
  const y1 = from.y - from.r;
  const x2 = to.x;
  const y2 = to.y + (to.r > 0 ? to.r : 0);
  const bend = Math.max(18, Math.abs(y1 - y2) * 0.45);
  return `M${x1.toFixed(1)},${y1.toFixed(1)} C${x1.toFixed(1)},${(y1 - bend).toFixed(1)} ${x2.toFixed(1)},${(y2 + bend).toFixed(1)} ${x2.toFixed(1)},${y2.toFixed(1)}`;
}

/** x of a circuit of `edges` edges on the curve's log axis over [1, total] (0 edges at the left end). */
export function curveX(edges: number, total: number, x0: number, x1: number): number {
  if (total <= 1 || edges <= 1) return x0;
  return x0 + ((x1 - x0) * Math.log(Math.min(edges, total))) / Math.log(total);
}

/** The measured value of the curve at exactly `size` edges, or null when that size was not measured. */
export function curveValueAt(edges: readonly number[], values: readonly number[], size: number): number | null {
  for (let i = edges.length - 1; i >= 0; i--) if (edges[i] === size) return values[i] ?? null;
  return null;
}

/**
 * The text drawn on a node: a head's `H<i>` and any other node's label in a component graph; in a graph per
 * position only a logit's token (features, errors and embeddings are too many to label: hover says what they are).
 */
export function shortLabel(kind: string, label: string, index: number, perPosition: boolean): string {
  if (!perPosition) return kind === "head" ? `H${index}` : label;
  if (kind !== "logit") return "";
  const token = /^logit (['"])(.*)\1/u.exec(label)?.[2] ?? label;
  const chars = Array.from(token);
  return chars.length > 6 ? `${chars.slice(0, 5).join("")}…` : token;
}
