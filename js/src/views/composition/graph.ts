// The composition map's graph: the strongest N edges between heads, each kind
// in its colour and dash, the selected edge outlined. Heads are drawn as
// circles (every head of a small model; of a large one only those the edges
// join, lib/graphlayout.ts), so at 32 × 32 heads nothing overlaps.

import { layerPalette, textOn } from "../../lib/colour";
import type { CompWords } from "../../lib/composition";
import { type CompData, compValue, type Edge, edgeId, edgeOpacity, edgePath, edgePoints, edgeWidth, type Kind, KIND_STYLE, KINDS, scaledDash, strongestEdges } from "../../lib/graph";
import { graphLayout } from "../../lib/graphlayout";
import { headName, svgEl, svgTitle } from "../../lib/svg";

/** A click this close (px) to an edge's curve selects the nearest edge. */
export const EDGE_PICK_PX = 8;

export interface GraphSelection {
  layer: number;
  head: number;
  edge: [number, number, number, number] | null;
  edgeKind: string;
}

/** The graph drawn, and each edge's curve in graph coordinates (for picking the nearest edge). */
export interface DrawnGraph {
  svg: SVGSVGElement;
  edges: { edge: Edge; points: { x: number; y: number }[] }[];
  /** How many heads the graph leaves out (0 when it draws every head). */
  hidden: number;
}

/** The edges the graph draws: the `n` strongest of `kinds` of at least `min`, plus the selected edge when it is not among them. */
export function graphEdges(d: CompData, kinds: readonly Kind[], n: number, subtract: boolean, sel: GraphSelection, min = 0): Edge[] {
  const edges = strongestEdges(d, kinds, n, subtract, min);
  if (sel.edge) {
    const [l1, h1, l2, h2] = sel.edge;
    const kind = (KINDS as readonly string[]).includes(sel.edgeKind) ? (sel.edgeKind as Kind) : null;
    const present = edges.some((e) => edgeId(e) === edgeId({ l1, h1, l2, h2 }) && (kind === null || e.kind === kind));
    if (!present && kind !== null) edges.push({ kind, l1, h1, l2, h2, value: compValue(d, KINDS.indexOf(kind), l1, h1, l2, h2, subtract) });
  }
  return edges;
}

/** The graph of `edges`; each edge's tooltip says its value in `words` (composition, or a titled map's scores). */
export function drawGraph(doc: Document, d: CompData, edges: readonly Edge[], sel: GraphSelection, words: CompWords): DrawnGraph {
  const layout = graphLayout(d.nLayers, d.nHeads, edges, sel);
  const colour = layerPalette(d.nLayers);
  const { width, height } = layout;
  const svg = svgEl(doc, "svg", { class: "cw-graph-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "composition graph" });
  for (const c of layout.columns) {
    const text = layout.complete ? `layer ${c.layer}` : `L${c.layer}`;
    svg.append(svgEl(doc, "text", { class: "cw-graph-layer", x: c.x, y: 14, "text-anchor": "middle", "font-size": 11.5, "font-weight": 600, fill: colour(c.layer) }, text));
  }
  const max = Math.max(0, ...edges.map((e) => e.value));
  const incident = (e: Edge) => (e.l1 === sel.layer && e.h1 === sel.head) || (e.l2 === sel.layer && e.h2 === sel.head);
  const isSelected = (e: Edge) =>
    sel.edge !== null && edgeId(e) === edgeId({ l1: sel.edge[0], h1: sel.edge[1], l2: sel.edge[2], h2: sel.edge[3] }) && (sel.edgeKind === "" || sel.edgeKind === e.kind);
  const edgeGroup = svgEl(doc, "g");
  const ordered = [...edges].sort((a, b) => Number(incident(a)) - Number(incident(b)) || a.value - b.value);
  const drawn: DrawnGraph["edges"] = [];
  for (const e of ordered) {
    const a = layout.node(e.l1, e.h1);
    const b = layout.node(e.l2, e.h2);
    if (a === null || b === null) continue;
    const bend = (KINDS.indexOf(e.kind) - 1) * 6;
    const path = edgePath(a, b, layout.radius, bend);
    drawn.push({ edge: e, points: edgePoints(a, b, layout.radius, bend) });
    const selected = isSelected(e);
    const g = svgEl(doc, "g", { class: "cw-edge", "data-cw-edge": edgeId(e), "data-cw-kind": e.kind });
    const style = KIND_STYLE[e.kind];
    if (selected) g.append(svgEl(doc, "path", { class: "cw-edge-selected", d: path, fill: "none", stroke: "#000", "stroke-width": edgeWidth(e.value, max) + 4, "stroke-opacity": 0.8 }));
    g.append(
      svgEl(doc, "path", {
        class: "cw-edge-line",
        d: path,
        fill: "none",
        stroke: style.colour,
        "stroke-width": edgeWidth(e.value, max),
        "stroke-dasharray": scaledDash(style.dash, edgeWidth(e.value, max)),
        // strength alone sets the shade, so a selected head's weak edge never looks strong
        "stroke-opacity": selected ? 0.95 : edgeOpacity(e.value, max),
        "stroke-linecap": "round",
      }),
    );
    g.append(svgEl(doc, "path", { d: path, fill: "none", stroke: "transparent", "stroke-width": 2 * EDGE_PICK_PX }));
    svgTitle(doc, g, words.pair(e.kind, headName(e.l1, e.h1), headName(e.l2, e.h2), e.value));
    edgeGroup.append(g);
  }
  svg.append(edgeGroup);
  for (const n of layout.nodes) {
    const selected = n.layer === sel.layer && n.head === sel.head;
    const g = svgEl(doc, "g", { "data-cw-head": `${n.layer}.${n.head}`, tabindex: 0 });
    g.append(svgEl(doc, "circle", { cx: n.x, cy: n.y, r: layout.radius, fill: selected ? colour(n.layer) : "#fff", stroke: colour(n.layer), "stroke-width": selected ? 3 : 1.8 }));
    if (layout.radius >= 7)
      g.append(svgEl(doc, "text", { x: n.x, y: n.y + 3.5, "text-anchor": "middle", "font-size": 10, "font-weight": 600, fill: selected ? textOn(colour(n.layer)) : "#333", "pointer-events": "none" }, String(n.head)));
    svgTitle(doc, g, headName(n.layer, n.head));
    svg.append(g);
  }
  return { svg, edges: drawn, hidden: d.nLayers * d.nHeads - layout.nodes.length };
}
