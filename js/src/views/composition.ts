// CompositionMap view: Q, K and V composition scores between every earlier and
// later head, as three heatmaps and as a layered graph of the strongest edges.
//
// Kernel → view: scores [3, L, H, L, H] (raw), baseline_value. View → kernel:
// subtract_baseline, kind (edges drawn), n_edges, selected_layer/head,
// selected_edge ([l1, h1, l2, h2] or []), edge_kind.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { DIVERGING, type Lut, VIRIDIS } from "../lib/colour";
import { el, listen } from "../lib/dom";
import {
  type CompData,
  compValue,
  type Edge,
  edgeId,
  edgeOpacity,
  edgeOr,
  edgePath,
  edgePoints,
  edgeWidth,
  type Kind,
  KIND_STYLE,
  KINDS,
  layeredLayout,
  nearestEdge,
  parseEdgeId,
  strongestEdges,
} from "../lib/graph";
import { colourBar } from "../lib/colourbar";
import { noExport } from "../lib/export";
import { cellAtEvent, drawHeatmap, outlineCells } from "../lib/heatmap";
import { offsetControl } from "../lib/offset";
import { clearError, makePanel, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { fmt, headName, layerColour, svgEl, svgTitle } from "../lib/svg";
import { colourLimit, heatmapCells, toCompData } from "../lib/composition";
import "../styles/composition.css";

export interface CompositionTraits {
  [key: string]: unknown;
  model_name: string;
  scores: WireArray;
  baseline_value: number;
  subtract_baseline: boolean;
  kind: string;
  n_edges: number;
  selected_layer: number;
  selected_head: number;
  selected_edge: number[];
  edge_kind: string;
}

type Model = AnyModel<CompositionTraits>;

const MAP_MIN = 150;
const MAP_MAX = 300;
const MAP_CELL = 32;
/** A click this close (px) to an edge's curve selects the nearest edge. */
const EDGE_PICK_PX = 8;
const EDGE_COUNTS = [6, 12, 24, 48];

export function renderComposition({ model, el: root }: RenderProps<CompositionTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "composition", "cw-composition");
  const cleanups: (() => void)[] = [];
  let data: CompData | null = null;
  const canvases: HTMLCanvasElement[] = [];

  const kindControl = segmented(
    doc,
    "Edges:",
    [{ value: "all", label: "all" }, ...KINDS.map((k) => ({ value: k, label: k, title: KIND_STYLE[k].label }))],
    (value) => {
      setTraits(m, { kind: value });
      frame.schedule();
    },
  );
  const baselineBox = el(doc, "input");
  baselineBox.type = "checkbox";
  const baselineLabel = el(doc, "label");
  baselineLabel.append(baselineBox, doc.createTextNode("minus random baseline"));
  baselineLabel.title = "Subtract the expected score of random matrices with the same shapes, as the paper's diagrams do";
  const countSelect = el(doc, "select");
  for (const n of EDGE_COUNTS) countSelect.append(el(doc, "option", undefined, String(n)));
  const countLabel = el(doc, "label", undefined, "strongest ");
  countLabel.append(countSelect);
  panel.controls.append(kindControl.element, countLabel, baselineLabel);
  cleanups.push(kindControl.cleanup);
  cleanups.push(offsetControl(doc, m as unknown as AnyModel<Record<string, unknown>>, panel.controls));

  const maps = el(doc, "div", "cw-maps");
  const graphBox = el(doc, "div", "cw-graph");
  const mapsColumn = el(doc, "div", "cw-maps-column");
  const barBox = el(doc, "div", "cw-bar-box");
  const cellLine = noExport(el(doc, "div", "cw-cell-value"));
  mapsColumn.append(maps, barBox, cellLine);
  panel.body.append(graphBox, mapsColumn);
  /** The edges drawn in the graph and their curves (graph coordinates), for picking the nearest. */
  let drawn: { edge: Edge; points: { x: number; y: number }[] }[] = [];
  const keys = el(doc, "div", "cw-keys");
  const note = el(doc, "div", "cw-note");
  panel.body.after(keys, note);
  for (const k of KINDS) {
    const item = el(doc, "span");
    const svg = svgEl(doc, "svg", { width: 26, height: 10, style: "display:inline-block;vertical-align:middle;margin-right:4px" });
    svg.append(svgEl(doc, "line", { x1: 1, x2: 25, y1: 5, y2: 5, stroke: KIND_STYLE[k].colour, "stroke-width": 2.5, "stroke-dasharray": KIND_STYLE[k].dash }));
    item.append(svg, doc.createTextNode(KIND_STYLE[k].label));
    keys.append(item);
  }

  function subtract(): boolean {
    return m.get("subtract_baseline") !== false;
  }

  function selection(d: CompData) {
    return {
      layer: indexOr(m.get("selected_layer"), d.nLayers, 0),
      head: indexOr(m.get("selected_head"), d.nHeads, 0),
      edge: edgeOr(m.get("selected_edge"), d.nLayers, d.nHeads),
      edgeKind: String(m.get("edge_kind") ?? ""),
    };
  }

  function load(): void {
    try {
      data = toCompData(decodeArray(m.get("scores")), Number(m.get("baseline_value")));
    } catch (err) {
      data = null;
      showError(panel, err);
      return;
    }
    clearError(panel);
    buildMaps(data);
  }

  function labelStrip(d: CompData, size: number, firstLayer: number, vertical: boolean): HTMLDivElement {
    const strip = el(doc, "div", vertical ? "cw-axis cw-axis-rows" : "cw-axis cw-axis-cols");
    const n = (d.nLayers - 1) * d.nHeads;
    if (n === 0) return strip;
    const cell = size / n;
    const labelEach = cell >= 14;
    for (let l = 0; l < d.nLayers - 1; l++) {
      if (labelEach) {
        for (let h = 0; h < d.nHeads; h++) {
          const s = el(doc, "span", undefined, vertical ? headName(l + firstLayer, h) : String(h));
          s.style[vertical ? "height" : "width"] = `${cell}px`;
          strip.append(s);
        }
      } else {
        const s = el(doc, "span", undefined, `L${l + firstLayer}`);
        s.style[vertical ? "height" : "width"] = `${cell * d.nHeads}px`;
        strip.append(s);
      }
    }
    return strip;
  }

  function buildMaps(d: CompData): void {
    canvases.length = 0;
    const n = (d.nLayers - 1) * d.nHeads;
    const size = Math.min(MAP_MAX, Math.max(MAP_MIN, n * MAP_CELL));
    const children = KINDS.map((kind) => {
      const box = el(doc, "div", "cw-map");
      box.append(el(doc, "div", "cw-map-title", `${kind}-composition`));
      const grid = el(doc, "div", "cw-map-grid");
      const corner = el(doc, "div", "cw-axis", n > 0 ? `later → L${1}${d.nLayers > 2 ? `–L${d.nLayers - 1}` : ""}` : "");
      const canvas = el(doc, "canvas");
      canvas.dataset.kind = kind;
      canvas.title = `${kind}-composition: rows earlier heads, columns later heads; click a cell to select the pair`;
      canvases.push(canvas);
      grid.append(corner, labelStrip(d, size, 1, false), labelStrip(d, size, 0, true), canvas);
      box.append(grid);
      return box;
    });
    if (n === 0) {
      maps.replaceChildren(el(doc, "div", "cw-note", "A one-layer model has no composition: every head reads the embeddings directly."));
      return;
    }
    maps.replaceChildren(...children);
  }

  function drawMaps(d: CompData, sel: ReturnType<typeof selection>): void {
    const n = (d.nLayers - 1) * d.nHeads;
    if (n === 0) return;
    const size = Math.min(MAP_MAX, Math.max(MAP_MIN, n * MAP_CELL));
    const sub = subtract();
    const limit = colourLimit(d, sub);
    const lut: Lut = sub ? DIVERGING : VIRIDIS;
    barBox.replaceChildren(
      colourBar(doc, lut, sub ? -limit : 0, limit, sub ? "composition score − random baseline" : "composition score", Math.max(200, Math.min(320, size + 40))),
    );
    canvases.forEach((canvas, k) => {
      const ctx = drawHeatmap(canvas, heatmapCells(d, k, sub, limit), lut, { width: size, height: size, empty: [236, 236, 236, 255] });
      if (ctx === null) return;
      ctx.save();
      ctx.strokeStyle = "rgba(255,255,255,0.9)";
      ctx.lineWidth = 1;
      for (let l = 1; l < d.nLayers - 1; l++) {
        const p = (l * d.nHeads * size) / n;
        ctx.beginPath();
        ctx.moveTo(p, 0);
        ctx.lineTo(p, size);
        ctx.moveTo(0, p);
        ctx.lineTo(size, p);
        ctx.stroke();
      }
      ctx.restore();
      if (sel.edge && (sel.edgeKind === "" || sel.edgeKind === KINDS[k])) {
        const [l1, h1, l2, h2] = sel.edge;
        outlineCells(ctx, n, n, size, size, l1 * d.nHeads + h1, (l2 - 1) * d.nHeads + h2, undefined, undefined, "#000");
      }
      if (sel.layer >= 1) {
        const col = (sel.layer - 1) * d.nHeads + sel.head;
        outlineCells(ctx, n, n, size, size, 0, col, n - 1, col, "rgba(0,0,0,0.35)");
      }
    });
  }

  function drawGraph(d: CompData, sel: ReturnType<typeof selection>): SVGSVGElement {
    const sub = subtract();
    const kindValue = String(m.get("kind") ?? "all");
    const kinds: Kind[] = (KINDS as readonly string[]).includes(kindValue) ? [kindValue as Kind] : [...KINDS];
    const n = Number(m.get("n_edges")) || 12;
    const edges = strongestEdges(d, kinds, n, sub);
    if (sel.edge) {
      const [l1, h1, l2, h2] = sel.edge;
      const kind = (KINDS as readonly string[]).includes(sel.edgeKind) ? (sel.edgeKind as Kind) : null;
      const present = edges.some((e) => edgeId(e) === edgeId({ l1, h1, l2, h2 }) && (kind === null || e.kind === kind));
      if (!present && kind !== null) {
        edges.push({ kind, l1, h1, l2, h2, value: compValue(d, KINDS.indexOf(kind), l1, h1, l2, h2, sub) });
      }
    }
    const width = Math.max(280, Math.min(560, 180 * d.nLayers));
    const layout = layeredLayout(d.nLayers, d.nHeads, width, { rowGap: d.nHeads > 16 ? 18 : 34, side: 40 });
    const svg = svgEl(doc, "svg", { width, height: layout.height, viewBox: `0 0 ${width} ${layout.height}`, role: "img", "aria-label": "composition graph" });
    for (let l = 0; l < d.nLayers; l++) {
      const p = layout.node(l, 0);
      svg.append(svgEl(doc, "text", { x: p.x, y: 14, "text-anchor": "middle", "font-size": 11.5, "font-weight": 600, fill: layerColour(l) }, `layer ${l}`));
    }
    const max = Math.max(0, ...edges.map((e) => e.value));
    const incident = (e: Edge) => (e.l1 === sel.layer && e.h1 === sel.head) || (e.l2 === sel.layer && e.h2 === sel.head);
    const edgeGroup = svgEl(doc, "g");
    const ordered = [...edges].sort((a, b) => Number(incident(a)) - Number(incident(b)) || a.value - b.value);
    drawn = [];
    for (const e of ordered) {
      const a = layout.node(e.l1, e.h1);
      const b = layout.node(e.l2, e.h2);
      const bend = (KINDS.indexOf(e.kind) - 1) * 6;
      const d1 = edgePath(a, b, layout.radius, bend);
      drawn.push({ edge: e, points: edgePoints(a, b, layout.radius, bend) });
      const isSelected = sel.edge !== null && edgeId(e) === edgeId({ l1: sel.edge[0], h1: sel.edge[1], l2: sel.edge[2], h2: sel.edge[3] }) && (sel.edgeKind === "" || sel.edgeKind === e.kind);
      const g = svgEl(doc, "g", { class: "cw-edge", "data-cw-edge": edgeId(e), "data-cw-kind": e.kind });
      const style = KIND_STYLE[e.kind];
      if (isSelected) g.append(svgEl(doc, "path", { class: "cw-edge-selected", d: d1, fill: "none", stroke: "#000", "stroke-width": edgeWidth(e.value, max) + 4, "stroke-opacity": 0.8 }));
      g.append(
        svgEl(doc, "path", {
          class: "cw-edge-line",
          d: d1,
          fill: "none",
          stroke: style.colour,
          "stroke-width": edgeWidth(e.value, max),
          "stroke-dasharray": style.dash,
          // strength alone sets the shade, so a selected head's weak edge never looks strong
          "stroke-opacity": isSelected ? 0.95 : edgeOpacity(e.value, max),
          "stroke-linecap": "round",
        }),
      );
      g.append(svgEl(doc, "path", { d: d1, fill: "none", stroke: "transparent", "stroke-width": 2 * EDGE_PICK_PX }));
      svgTitle(doc, g, `${headName(e.l1, e.h1)} → ${headName(e.l2, e.h2)}: ${e.kind}-composition ${fmt(e.value, 3)}${sub ? " above baseline" : ""}`);
      edgeGroup.append(g);
    }
    svg.append(edgeGroup);
    for (let l = 0; l < d.nLayers; l++)
      for (let h = 0; h < d.nHeads; h++) {
        const p = layout.node(l, h);
        const selected = l === sel.layer && h === sel.head;
        const g = svgEl(doc, "g", { "data-cw-head": `${l}.${h}`, tabindex: 0 });
        g.append(
          svgEl(doc, "circle", { cx: p.x, cy: p.y, r: layout.radius, fill: selected ? layerColour(l) : "#fff", stroke: layerColour(l), "stroke-width": selected ? 3 : 1.8 }),
        );
        if (layout.radius >= 7)
          g.append(
            svgEl(doc, "text", { x: p.x, y: p.y + 3.5, "text-anchor": "middle", "font-size": 10, "font-weight": 600, fill: selected ? "#fff" : "#333", "pointer-events": "none" }, String(h)),
          );
        svgTitle(doc, g, headName(l, h));
        svg.append(g);
      }
    return svg;
  }

  function draw(): void {
    const d = data;
    if (d === null) return;
    const sel = selection(d);
    const sub = subtract();
    setTitle(panel, "Composition between heads", String(m.get("model_name") ?? ""));
    kindControl.update(String(m.get("kind") ?? "all"));
    baselineBox.checked = sub;
    countSelect.value = String(Number(m.get("n_edges")) || 12);
    if (!EDGE_COUNTS.includes(Number(countSelect.value))) countSelect.value = "12";
    drawMaps(d, sel);
    const graph = drawGraph(d, sel);
    graphBox.replaceChildren(graph);
    note.textContent = sub
      ? `Scores ‖W_A W_B‖ / (‖W_A‖ ‖W_B‖) minus ${fmt(d.baseline, 3)}, the expected score of random matrices (blue below, red above).`
      : "Scores ‖W_A W_B‖ / (‖W_A‖ ‖W_B‖), raw.";
    note.append(noExport(el(doc, "span", undefined, " Click an edge, a cell or a head; hover a cell for its value.")));
    if (sel.edge) {
      const [l1, h1, l2, h2] = sel.edge;
      const k = KINDS.indexOf(sel.edgeKind as Kind);
      const value = k >= 0 ? ` (${sel.edgeKind}, ${fmt(compValue(d, k, l1, h1, l2, h2, sub), 3)}${sub ? " above baseline" : ""})` : "";
      panel.status.textContent = `Edge ${headName(l1, h1)} → ${headName(l2, h2)}${value} selected; ${headName(sel.layer, sel.head)} selected`;
    } else {
      panel.status.textContent = `${headName(sel.layer, sel.head)} selected`;
    }
  }

  const frame = perFrame(draw);

  /** A pointer event's position in the graph's own coordinates (the SVG may be drawn scaled). */
  function graphPoint(event: MouseEvent): { x: number; y: number } | null {
    const svg = graphBox.querySelector("svg");
    const ctm = svg?.getScreenCTM?.();
    if (!svg || !ctm) return null;
    const inv = ctm.inverse();
    return { x: inv.a * event.clientX + inv.c * event.clientY + inv.e, y: inv.b * event.clientX + inv.d * event.clientY + inv.f };
  }

  function selectEdge(l1: number, h1: number, l2: number, h2: number, kind: string): void {
    setTraits(m, { selected_edge: [l1, h1, l2, h2], edge_kind: kind, selected_layer: l2, selected_head: h2 });
    frame.schedule();
  }

  cleanups.push(
    listen(graphBox, "click", (event) => {
      const target = event.target as Element | null;
      const node = target?.closest?.("[data-cw-head]");
      if (!node) {
        // the edge whose curve is nearest the pointer (at a crossing, the one the pointer is closer to)
        const p = graphPoint(event);
        const i = p === null ? -1 : nearestEdge(p, drawn.map((d) => d.points), EDGE_PICK_PX);
        const hit = drawn[i]?.edge;
        if (hit) {
          selectEdge(hit.l1, hit.h1, hit.l2, hit.h2, hit.kind);
          return;
        }
        const edge = target?.closest?.("[data-cw-edge]");
        const parsed = edge ? parseEdgeId(edge.getAttribute("data-cw-edge") ?? "") : null;
        if (edge && parsed) selectEdge(...parsed, edge.getAttribute("data-cw-kind") ?? "");
        return;
      }
      if (node) {
        const [layer, head] = (node.getAttribute("data-cw-head") ?? "").split(".").map(Number);
        setTraits(m, { selected_layer: layer as number, selected_head: head as number });
        frame.schedule();
      }
    }),
    listen(maps, "click", (event) => {
      const d = data;
      const canvas = event.target;
      if (d === null || !(canvas instanceof HTMLCanvasElement)) return;
      const n = (d.nLayers - 1) * d.nHeads;
      const cell = cellAtEvent(event, canvas, n, n);
      if (cell === null) return;
      const l1 = Math.floor(cell.row / d.nHeads);
      const l2 = Math.floor(cell.col / d.nHeads) + 1;
      if (l1 >= l2) return;
      selectEdge(l1, cell.row % d.nHeads, l2, cell.col % d.nHeads, canvas.dataset.kind ?? "");
    }),
    listen(maps, "mousemove", (event) => {
      const d = data;
      const canvas = event.target;
      if (d === null || !(canvas instanceof HTMLCanvasElement)) return;
      const n = (d.nLayers - 1) * d.nHeads;
      const cell = cellAtEvent(event, canvas, n, n);
      if (cell === null) return;
      const l1 = Math.floor(cell.row / d.nHeads);
      const l2 = Math.floor(cell.col / d.nHeads) + 1;
      const k = KINDS.indexOf((canvas.dataset.kind ?? "Q") as Kind);
      const v = compValue(d, k, l1, cell.row % d.nHeads, l2, cell.col % d.nHeads, subtract());
      const text = `${canvas.dataset.kind ?? ""}-composition ${headName(l1, cell.row % d.nHeads)} → ${headName(l2, cell.col % d.nHeads)}: ${Number.isFinite(v) ? `${fmt(v, 3)}${subtract() ? " above baseline" : ""}` : "not an earlier head"}`;
      canvas.title = text;
      cellLine.textContent = text;
    }),
    listen(maps, "mouseleave", () => {
      cellLine.textContent = "";
    }),
    listen(baselineBox, "change", () => {
      setTraits(m, { subtract_baseline: baselineBox.checked });
      frame.schedule();
    }),
    listen(countSelect, "change", () => {
      setTraits(m, { n_edges: Number(countSelect.value) });
      frame.schedule();
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["scores", "baseline_value"], redraw: ["subtract_baseline", "kind", "n_edges", "selected_layer", "selected_head", "selected_edge", "edge_kind", "model_name"] }, load, draw);
}
