// An attribution graph a reader can read (pure functions, testable without a DOM): which edges its influence
// thresholds keep, and a layout in which no two nodes overlap whatever the width.
//
// Pruning is circuit-tracer's: a node stays while the influence share before it is under the node threshold
// (tokens and logits always), an edge while the share before it is under the edge threshold (edges arrive
// strongest first by influence); then only edges on a path from a token or error to a logit, and always each
// logit's strongest path back to a token or error, so no threshold leaves the logits unreachable.
//
// Layout: positions are columns (the token's text under each), layers rows (embeddings at the bottom, logits on
// top). The nodes of one layer at one position sit in slots of a grid inside their cell, `pitch` px apart; a
// column is as wide as its most crowded cell needs, so nodes never overlap: a narrow container scrolls, it
// never squeezes.

import { keptEdges, type GraphLayout, type GraphNodes, type Placed } from "./graphview";

/** Slot size: a node (radius `r`) and its label under it. */
export const PITCH_X = 46;
export const PITCH_Y = 34;
export const NODE_R = 7;
/** Positions beyond which empty columns go unlabelled. */
export const LONG = 256;
/** Slots per line in a cell before it takes another line. */
const PER_LINE = 4;

/** Each logit's strongest path back to a token or error: edge indices (edges in influence order, strongest first). */
export function spineEdges(kinds: readonly string[], src: ArrayLike<number>, dst: ArrayLike<number>): Set<number> {
  const best = new Map<number, number>();
  for (let e = src.length - 1; e >= 0; e--) best.set(dst[e] as number, e); // the strongest written last
  const out = new Set<number>();
  kinds.forEach((k, start) => {
    if (k !== "logit") return;
    let node = start;
    const seen = new Set<number>();
    while (best.has(node) && !seen.has(node) && kinds[node] !== "embedding" && kinds[node] !== "error") {
      seen.add(node);
      const e = best.get(node) as number;
      out.add(e);
      node = src[e] as number;
    }
  });
  return out;
}

/** Which edges the thresholds keep (see the module comment), over the first `size` edges. */
export function keptByInfluence(
  nodes: GraphNodes,
  src: ArrayLike<number>,
  dst: ArrayLike<number>,
  nodeShare: ArrayLike<number>,
  edgeShare: ArrayLike<number>,
  nodeThreshold: number,
  edgeThreshold: number,
  size = src.length,
): boolean[] {
  const n = Math.min(size, src.length);
  const always = (i: number) => nodes.kind[i] === "embedding" || nodes.kind[i] === "logit";
  const nodeOk = (i: number) => always(i) || !((nodeShare[i] ?? 0) >= nodeThreshold);
  // edges in order: the prefix under the edge threshold, among kept nodes
  const order: number[] = [];
  for (let e = 0; e < n; e++) if (!((edgeShare[e] ?? 0) >= edgeThreshold) && nodeOk(src[e] as number) && nodeOk(dst[e] as number)) order.push(e);
  const s = order.map((e) => src[e] as number);
  const d = order.map((e) => dst[e] as number);
  const live = keptEdges(nodes, s, d, s.length);
  const out = new Array<boolean>(src.length).fill(false);
  order.forEach((e, k) => (out[e] = Boolean(live[k])));
  for (const e of spineEdges(nodes.kind, src, dst)) out[e] = true;
  return out;
}

/** The nodes an attribution graph draws: the kept edges' ends, the pinned nodes, the logits. */
export function shownNodes(edges: readonly boolean[], src: ArrayLike<number>, dst: ArrayLike<number>, kinds: readonly string[], pinned: readonly number[]): Set<number> {
  const out = new Set<number>(pinned);
  edges.forEach((k, e) => k && out.add(src[e] as number).add(dst[e] as number));
  kinds.forEach((k, i) => k === "logit" && out.add(i));
  return out;
}

/** Layout of the `shown` nodes (see the module comment); the others get no place. */
export function readableLayout(nodes: GraphNodes, shown: ReadonlySet<number>, tokens: readonly string[], opts: { left?: number } = {}): GraphLayout {
  const left = opts.left ?? 56;
  const n = nodes.kind.length;
  const nPos = Math.max(tokens.length, ...Array.from({ length: n }, (_, i) => (nodes.pos[i] as number) + 1), 1);
  const layers = [...new Set([...shown].map((i) => nodes.layer[i] as number))].sort((a, b) => a - b);
  const cells = new Map<string, number[]>();
  for (const i of [...shown].sort((a, b) => a - b)) {
    const key = `${nodes.layer[i]}/${Math.max(0, nodes.pos[i] as number)}`;
    cells.set(key, [...(cells.get(key) ?? []), i]);
  }
  // each column: as many slots across as its most crowded cell needs (up to PER_LINE, then more lines)
  const across = new Int32Array(nPos).fill(0);
  const linesOf = new Map<number, number>(); // layer → most lines any of its cells needs
  for (const [key, members] of cells) {
    const [layer, pos] = key.split("/").map(Number) as [number, number];
    const a = Math.min(PER_LINE, members.length);
    across[pos] = Math.max(across[pos] as number, a);
    linesOf.set(layer, Math.max(linesOf.get(layer) ?? 1, Math.ceil(members.length / PER_LINE)));
  }
  const colX = new Float64Array(nPos);
  const colW = new Float64Array(nPos);
  let x = left;
  for (let p = 0; p < nPos; p++) {
    const w = (across[p] as number) > 0 ? (across[p] as number) * PITCH_X : 16; // (an empty column: its token only)
    colX[p] = x;
    colW[p] = w;
    x += w;
  }
  const width = x + 16;
  const top = 46; // (room for the logits' tokens and probabilities)
  const rowY = new Map<number, number>();
  let y = top;
  for (const layer of [...layers].reverse()) {
    rowY.set(layer, y);
    y += (linesOf.get(layer) ?? 1) * PITCH_Y + 18;
  }
  const bottom = 70; // (room for the tokens, written upwards from the bottom)
  const height = y + bottom;
  const placed: Placed[] = new Array(n);
  for (const [key, members] of cells) {
    const [layer, pos] = key.split("/").map(Number) as [number, number];
    const across0 = Math.min(PER_LINE, members.length);
    const cx = (colX[pos] as number) + ((colW[pos] as number) - across0 * PITCH_X) / 2;
    members.forEach((i, k) => {
      placed[i] = { x: cx + (k % PER_LINE) * PITCH_X + PITCH_X / 2, y: (rowY.get(layer) as number) + Math.floor(k / PER_LINE) * PITCH_Y + NODE_R, r: NODE_R };
    });
  }
  return {
    width,
    height,
    nodes: placed,
    rows: layers.map((layer) => ({ layer, y: (rowY.get(layer) as number) + NODE_R })),
    // (a long prompt's empty columns are 16 px slivers: their tokens are left out, the nodes' columns keep theirs)
    columns: Array.from({ length: nPos }, (_, p) => ({ label: nPos > LONG && !across[p] ? "" : clip(tokens[p] ?? String(p), 10), x: (colX[p] as number) + (colW[p] as number) / 2 })),
  };
}

/** Pairs of placed nodes whose slots overlap (their circles, or their label boxes under them): none by design. */
export function overlappingPairs(placed: readonly (Placed | undefined)[]): [number, number][] {
  const out: [number, number][] = [];
  const items = placed.map((p, i) => [i, p] as const).filter((e): e is readonly [number, Placed] => e[1] !== undefined && e[1].r > 0);
  items.sort((a, b) => a[1].x - b[1].x);
  for (let a = 0; a < items.length; a++) {
    const [i, p] = items[a] as readonly [number, Placed];
    for (let b = a + 1; b < items.length; b++) {
      const [j, q] = items[b] as readonly [number, Placed];
      if (q.x - p.x >= PITCH_X - 1e-6) break;
      if (Math.abs(q.y - p.y) < PITCH_Y - 1e-6) out.push([i, j]);
    }
  }
  return out;
}

/** A label cut to `max` characters (with an ellipsis), for a slot. */
export function clip(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length > max ? `${chars.slice(0, max - 1).join("")}…` : text;
}
