// Pinned nodes and supernodes of the graph view (pure functions, testable without a DOM).
//
// `pinned` lists node rows; `supernodes` groups rows under a user's label (no
// row in two groups). The subgraph is the pinned and grouped nodes with every
// edge between them (not only the slider's strongest), a supernode drawn as
// one node whose edges are its members' summed; edges inside a group are
// dropped (they are the group's own business).

export interface Supernode {
  label: string;
  nodes: number[];
}

/** The `supernodes` trait as typed groups (anything malformed is dropped, never thrown). */
export function parseSupernodes(value: unknown): Supernode[] {
  if (!Array.isArray(value)) return [];
  const out: Supernode[] = [];
  for (const g of value) {
    if (typeof g !== "object" || g === null) continue;
    const { label, nodes } = g as { label?: unknown; nodes?: unknown };
    if (typeof label !== "string" || !Array.isArray(nodes)) continue;
    out.push({ label, nodes: nodes.filter((n): n is number => Number.isInteger(n)) });
  }
  return out;
}

/** The `pinned` trait as node rows. */
export function parsePinned(value: unknown): number[] {
  return Array.isArray(value) ? value.filter((n): n is number => Number.isInteger(n)) : [];
}

/** Pin `node`, or unpin it (and take it out of its group, dropping a group left empty). */
export function togglePin(pinned: readonly number[], groups: readonly Supernode[], node: number): { pinned: number[]; supernodes: Supernode[] } {
  if (!pinned.includes(node)) return { pinned: [...pinned, node], supernodes: groups.map((g) => ({ ...g })) };
  const supernodes = groups.map((g) => ({ label: g.label, nodes: g.nodes.filter((n) => n !== node) })).filter((g) => g.nodes.length > 0);
  return { pinned: pinned.filter((n) => n !== node), supernodes };
}

/** The pinned nodes in no group yet (what "group" would group). */
export function ungroupedPins(pinned: readonly number[], groups: readonly Supernode[]): number[] {
  const grouped = new Set(groups.flatMap((g) => g.nodes));
  return pinned.filter((n) => !grouped.has(n));
}

/** The groups with the ungrouped pins added as a new group `label`, or null when there is nothing to group. */
export function groupPins(pinned: readonly number[], groups: readonly Supernode[], label: string): Supernode[] | null {
  const free = ungroupedPins(pinned, groups);
  const name = label.trim();
  if (!free.length || !name) return null;
  return [...groups.map((g) => ({ ...g })), { label: name, nodes: free }];
}

/** The groups without group `k` (its nodes stay pinned). */
export function ungroup(groups: readonly Supernode[], k: number): Supernode[] {
  return groups.filter((_, i) => i !== k).map((g) => ({ ...g }));
}

export interface SubgraphEdge {
  /** Drawn node ids: `n<row>` for a node, `g<k>` for supernode k. */
  from: string;
  to: string;
  weight: number;
}

export interface Subgraph {
  /** Rows drawn as themselves (pinned, in no group). */
  nodes: number[];
  edges: SubgraphEdge[];
}

/** The drawn id of row `i`: its group's when it has one. */
export function drawnId(groups: readonly Supernode[], i: number): string {
  const k = groups.findIndex((g) => g.nodes.includes(i));
  return k >= 0 ? `g${k}` : `n${i}`;
}

/** The subgraph of the pinned and grouped nodes (module comment), strongest edges first. */
export function subgraph(pinned: readonly number[], groups: readonly Supernode[], src: ArrayLike<number>, dst: ArrayLike<number>, weight: ArrayLike<number>): Subgraph {
  const owner = new Map<number, string>();
  groups.forEach((g, k) => g.nodes.forEach((n) => owner.set(n, `g${k}`)));
  for (const n of pinned) if (!owner.has(n)) owner.set(n, `n${n}`);
  const sums = new Map<string, SubgraphEdge>();
  for (let e = 0; e < src.length; e++) {
    const a = owner.get(src[e] as number);
    const b = owner.get(dst[e] as number);
    if (a === undefined || b === undefined || a === b) continue;
    const key = `${a}|${b}`;
    const edge = sums.get(key) ?? { from: a, to: b, weight: 0 };
    edge.weight += weight[e] as number;
    sums.set(key, edge);
  }
  const edges = [...sums.values()].sort((x, y) => Math.abs(y.weight) - Math.abs(x.weight));
  const nodes = pinned.filter((n) => owner.get(n) === `n${n}`);
  return { nodes, edges };
}

/** A node's radius scaled by its influence (`r` at the largest, 0.45 `r` at none; NaN: `r`). */
export function influenceRadius(r: number, influence: number, max: number): number {
  if (!Number.isFinite(influence) || !(max > 0)) return r;
  return r * (0.45 + 0.55 * Math.sqrt(Math.max(0, Math.min(1, influence / max))));
}

/** Scale every drawn node's radius (ports keep 0) by its influence, against the largest. */
export function scaleByInfluence(placed: { r: number }[], influence: ArrayLike<number>): void {
  let most = 0;
  for (const v of Array.from(influence)) if (Number.isFinite(v)) most = Math.max(most, v);
  placed.forEach((p, i) => {
    if (p && p.r > 0) p.r = influenceRadius(p.r, influence[i] as number, most);
  });
}
