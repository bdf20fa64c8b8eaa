// The graph view's pinned subgraph: only the pinned nodes and supernodes (each drawn as one node, its members'
// edges summed), with every edge of the graph between them.

import type { Supernode } from "../../lib/graphpins";
import { subgraph } from "../../lib/graphpins";
import type { GraphLayout, Placed } from "../../lib/graphview";
import { svgEl, svgTitle } from "../../lib/svg";
import { visibleLabel } from "../../lib/tokens";
import { supernodeEl } from "./pins";

export interface PinnedInput {
  doc: Document;
  src: ArrayLike<number>;
  dst: ArrayLike<number>;
  weight: ArrayLike<number>;
  labels: readonly string[];
  pinned: readonly number[];
  grouped: readonly Supernode[];
  say: (text: string) => void;
  edgeEl: (from: Placed, to: Placed, w: number, max: number, title: string, e: number | string) => SVGPathElement;
  nodeEl: (i: number, p: Placed, active: boolean, isPinned: boolean, grouped: readonly Supernode[]) => SVGGElement;
}

/** Draw the pinned subgraph into `svg`; the widest |weight| drawn. */
export function drawPinned(svg: SVGSVGElement, layout: GraphLayout, c: PinnedInput): number {
  const { doc, src, dst, weight, labels, grouped, edgeEl, nodeEl } = c;
  const sub = subgraph(c.pinned, grouped, src, dst, weight);
  c.say(` pinned subgraph: ${sub.nodes.length} nodes, ${grouped.length} supernodes, ${sub.edges.length} edges (all edges between them)`);
  svgTitle(doc, svg, `pinned subgraph: ${sub.edges.length} edges`);
  const at = new Map<string, Placed>();
  for (const i of sub.nodes) if (layout.nodes[i]) at.set(`n${i}`, layout.nodes[i] as Placed);
  grouped.forEach((g, k) => {
    const ps = g.nodes.map((i) => layout.nodes[i]).filter((p): p is Placed => Boolean(p));
    const mean = (f: (p: Placed) => number) => ps.reduce((a, p) => a + f(p), 0) / Math.max(1, ps.length);
    at.set(`g${k}`, { x: mean((p) => p.x), y: mean((p) => p.y), r: 12 });
  });
  const max = Math.max(0, ...sub.edges.map((e) => Math.abs(e.weight)));
  const name = (id: string) => (id.startsWith("g") ? visibleLabel(grouped[Number(id.slice(1))]?.label ?? id) : (labels[Number(id.slice(1))] ?? id));
  const edges = svgEl(doc, "g", { class: "cw-edges" });
  for (const e of [...sub.edges].reverse()) {
    const from = at.get(e.from);
    const to = at.get(e.to);
    if (from && to) edges.append(edgeEl(from, to, e.weight, max, `${name(e.from)} → ${name(e.to)}`, `${e.from}|${e.to}`));
  }
  svg.append(edges);
  const dots = svgEl(doc, "g", { class: "cw-nodes" });
  for (const i of sub.nodes) if (layout.nodes[i]) dots.append(nodeEl(i, layout.nodes[i] as Placed, true, true, grouped));
  grouped.forEach((g, k) => {
    const p = at.get(`g${k}`) as Placed;
    dots.append(supernodeEl(doc, g, k, p, labels));
  });
  svg.append(dots);
  return max;
}

