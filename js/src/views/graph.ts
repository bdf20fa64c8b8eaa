// AttributionGraph view: a graph of a model's computation (component graphs
// from edge attribution; attribution graphs over features) with a size slider
// that prunes it and, beside it, the faithfulness curve over circuit sizes
// with the chosen size marked. Hover says a node's or an edge's weight; a
// click selects a node, and a head (or one of its q/k/v inputs) selects the
// head in every linked view.
//
// Kernel → view: node_kind, node_label, node_layer, node_pos, node_index,
// edge_src, edge_dst, edge_weight (strongest first), prompt, curve_edges,
// curve_values, curve_note, title, metric, caption, negative_note,
// positive_note, model_name. View → kernel: size, selected_node,
// selected_layer, selected_head. Drawn in SVG; every label is set as text.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { el, listen } from "../lib/dom";
import { curveValueAt, curveX, edgeColour, edgePath, edgeWidth, INPUT_KINDS, keptEdges, layoutGraph, type GraphNodes } from "../lib/graphview";
import { clearError, makePanel, redrawOnResize, runView, setTitle, showError } from "../lib/panel";
import { perFrame, setTraits } from "../lib/selection";
import { fmt, svgEl, svgTitle } from "../lib/svg";
import { visibleLabel, visibleToken } from "../lib/tokens";
import "../styles/graph.css";

export interface GraphTraits {
  [key: string]: unknown;
  node_kind: string[];
  node_label: string[];
  node_layer: WireArray;
  node_pos: WireArray;
  node_index: WireArray;
  edge_src: WireArray;
  edge_dst: WireArray;
  edge_weight: WireArray;
  prompt: string[];
  curve_edges: number[];
  curve_values: number[];
  curve_note: string;
  title: string;
  metric: string;
  caption: string;
  negative_note: string;
  positive_note: string;
  model_name: string;
  size: number;
  selected_node: number;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<GraphTraits>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const numbers = (v: unknown): number[] => (Array.isArray(v) ? v.map((s) => Number(s)) : []);
const num = (v: unknown, fallback = -1): number => (typeof v === "number" && Number.isInteger(v) ? v : fallback);

interface Data {
  nodes: GraphNodes;
  labels: string[];
  src: ArrayLike<number>;
  dst: ArrayLike<number>;
  weight: ArrayLike<number>;
}

export function renderGraph({ model, el: root }: RenderProps<GraphTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "graph", "cw-graph", () => `${num(m.get("size"), 0)}-edges`);
  const slider = el(doc, "input");
  slider.type = "range";
  slider.min = "0";
  slider.dataset.cwSize = "";
  const sliderLabel = el(doc, "label", "cw-size");
  const sliderText = el(doc, "span");
  sliderLabel.append("Edges kept: ", slider, sliderText);
  panel.controls.append(sliderLabel);
  const row = el(doc, "div", "cw-graph-row");
  const plot = el(doc, "div", "cw-plot cw-scroll");
  const side = el(doc, "div", "cw-graph-side");
  row.append(plot, side);
  const note = el(doc, "div", "cw-note cw-caption");
  panel.body.append(row, note);
  let data: Data | null = null;
  let hovered: string | null = null;
  const cleanups: (() => void)[] = [];

  function load(): void {
    try {
      const int = (name: keyof GraphTraits) => decodeArray(m.get(name) as WireArray).data;
      const nodes: GraphNodes = { kind: strings(m.get("node_kind")), layer: int("node_layer"), pos: int("node_pos"), index: int("node_index") };
      const src = int("edge_src");
      const dst = int("edge_dst");
      const weight = int("edge_weight");
      if (src.length !== dst.length || src.length !== weight.length) throw new Error("circuitwidgets: edge_src, edge_dst and edge_weight differ in length");
      data = { nodes, labels: strings(m.get("node_label")).map(visibleLabel), src, dst, weight };
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  function size(): number {
    return Math.max(0, Math.min(num(m.get("size"), 0), data?.src.length ?? 0));
  }

  function draw(): void {
    setTitle(panel, String(m.get("title") || "Graph"), String(m.get("model_name") ?? ""));
    if (data === null) {
      plot.replaceChildren();
      side.replaceChildren();
      return;
    }
    const { nodes, labels, src, dst, weight } = data;
    const n = size();
    slider.max = String(src.length);
    slider.value = String(n);
    const kept = keptEdges(nodes, src, dst, n);
    const drawnCount = kept.filter(Boolean).length;
    sliderText.textContent = ` ${n} of ${src.length} (${drawnCount} drawn: edges on a path from the input to the logits)`;
    const layout = layoutGraph(nodes, Math.max(420, (root.clientWidth || 900) - 300), strings(m.get("prompt")).map((t) => visibleToken(t)));
    const svg = svgEl(doc, "svg", { width: layout.width, height: layout.height, viewBox: `0 0 ${layout.width} ${layout.height}`, class: "cw-graph-svg", role: "img" });
    svgTitle(doc, svg, `${String(m.get("title") ?? "graph")}: ${drawnCount} edges`);
    for (const r of layout.rows) {
      const name = r.layer < 0 ? "embed" : nodes.kind.some((k, i) => k === "logit" && nodes.layer[i] === r.layer) ? "logits" : `L${r.layer}`;
      svg.append(svgEl(doc, "text", { x: 6, y: r.y + 4, "font-size": 11, fill: "#555" }, name));
    }
    for (const c of layout.columns) svg.append(svgEl(doc, "text", { x: c.x, y: layout.height - 6, "text-anchor": "middle", "font-size": 10, fill: "#777" }, c.label));
    let max = 0;
    for (let e = 0; e < n; e++) if (kept[e]) max = Math.max(max, Math.abs(weight[e] as number));
    const edges = svgEl(doc, "g", { class: "cw-edges" });
    for (let e = n - 1; e >= 0; e--) {
      // weakest first, so the strongest edges are drawn on top
      if (!kept[e]) continue;
      const s = src[e] as number;
      const d = dst[e] as number;
      const w = weight[e] as number;
      const from = layout.nodes[s];
      const to = layout.nodes[d];
      if (!from || !to) continue;
      const path = svgEl(doc, "path", { d: edgePath(from, to), fill: "none", stroke: edgeColour(w), "stroke-width": edgeWidth(w, max), "stroke-opacity": 0.75, class: "cw-edge", "data-cw-edge": e });
      svgTitle(doc, path, `${labels[s]} → ${labels[d]}: ${fmt(w, 3)}`);
      edges.append(path);
    }
    svg.append(edges);
    const selNode = num(m.get("selected_node"));
    const selLayer = num(m.get("selected_layer"));
    const selHead = num(m.get("selected_head"));
    const shown = new Set<number>();
    for (let e = 0; e < n; e++) if (kept[e]) shown.add(src[e] as number).add(dst[e] as number);
    const dots = svgEl(doc, "g", { class: "cw-nodes" });
    nodes.kind.forEach((kind, i) => {
      const p = layout.nodes[i];
      if (!p) return;
      const active = shown.has(i);
      const g = svgEl(doc, "g", { class: "cw-node", "data-cw-node": i, "data-cw-kind": kind });
      if (INPUT_KINDS.has(kind)) {
        g.append(svgEl(doc, "text", { x: p.x, y: p.y + 8, "text-anchor": "middle", "font-size": 8, fill: active ? "#333" : "#bbb" }, kind.slice(-1)));
        g.append(svgEl(doc, "rect", { x: p.x - 4, y: p.y - 2, width: 8, height: 12, fill: "transparent" }));
      } else {
        const isHead = kind === "head";
        const selected = i === selNode || (isHead && nodes.layer[i] === selLayer && nodes.index[i] === selHead);
        const shape = kind === "mlp" || kind === "logit" || kind === "embedding"
          ? svgEl(doc, "rect", { x: p.x - p.r * 1.3, y: p.y - p.r, width: p.r * 2.6, height: p.r * 2, rx: 3 })
          : svgEl(doc, "circle", { cx: p.x, cy: p.y, r: p.r });
        shape.setAttribute("fill", active ? "#f4f4f4" : "#fbfbfb");
        shape.setAttribute("stroke", selected ? "#111" : active ? "#666" : "#ccc");
        shape.setAttribute("stroke-width", selected ? "2.5" : "1");
        g.append(shape);
        if (selected) g.dataset.cwSelected = "";
        const short = kind === "head" ? `H${nodes.index[i]}` : labels[i] ?? "";
        if (p.r >= 8 || kind !== "head") g.append(svgEl(doc, "text", { x: p.x, y: p.y + 3.5, "text-anchor": "middle", "font-size": 9, fill: active ? "#222" : "#aaa", "pointer-events": "none" }, short));
      }
      svgTitle(doc, g, describeNode(i));
      dots.append(g);
    });
    svg.append(dots);
    plot.replaceChildren(svg);
    side.replaceChildren(legend(max), curve(n, src.length));
    note.textContent = `${String(m.get("caption") ?? "")}. ${String(m.get("curve_note") ?? "")}`.trim();
    status();
  }

  function describeNode(i: number): string {
    if (data === null) return "";
    const { src, dst, weight, labels } = data;
    const n = size();
    let into = 0;
    let out = 0;
    for (let e = 0; e < n; e++) {
      if (dst[e] === i) into += Math.abs(weight[e] as number);
      if (src[e] === i) out += Math.abs(weight[e] as number);
    }
    return `${labels[i] ?? i}: |weight| in ${fmt(into, 3)}, out ${fmt(out, 3)} (kept edges)`;
  }

  function legend(max: number): SVGSVGElement {
    const svg = svgEl(doc, "svg", { width: 260, height: 70, class: "cw-graph-legend" });
    const rows: [string, string][] = [
      [edgeColour(-1), String(m.get("negative_note") ?? "negative")],
      [edgeColour(1), String(m.get("positive_note") ?? "positive")],
    ];
    rows.forEach(([colour, text], k) => {
      svg.append(svgEl(doc, "line", { x1: 4, x2: 28, y1: 10 + k * 16, y2: 10 + k * 16, stroke: colour, "stroke-width": 3 }));
      svg.append(svgEl(doc, "text", { x: 34, y: 14 + k * 16, "font-size": 10, fill: "#333" }, text));
    });
    svg.append(svgEl(doc, "line", { x1: 4, x2: 28, y1: 46, y2: 46, stroke: "#888", "stroke-width": edgeWidth(max, max) }));
    svg.append(svgEl(doc, "text", { x: 34, y: 50, "font-size": 10, fill: "#333" }, `width: |weight| (widest ${fmt(max, 3)})`));
    svg.append(svgEl(doc, "text", { x: 4, y: 66, "font-size": 10, fill: "#333" }, "q k v under a head: its query, key, value inputs"));
    return svg;
  }

  function curve(n: number, total: number): SVGSVGElement | HTMLElement {
    const xs = numbers(m.get("curve_edges"));
    const ys = numbers(m.get("curve_values"));
    if (!xs.length) return el(doc, "div", "cw-note", "No faithfulness curve (pass graphs.faithfulness_curve(...) as curve=).");
    const W = 260;
    const H = 190;
    const x0 = 40;
    const x1 = W - 10;
    const lo = Math.min(0, ...ys);
    const hi = Math.max(1, ...ys);
    const y = (v: number) => 12 + ((hi - v) / (hi - lo)) * (H - 44);
    const svg = svgEl(doc, "svg", { width: W, height: H, class: "cw-curve", role: "img" });
    svgTitle(doc, svg, "faithfulness against edges kept (log scale)");
    for (const t of [0, 0.5, 1]) {
      svg.append(svgEl(doc, "line", { x1: x0, x2: x1, y1: y(t), y2: y(t), stroke: t === 1 ? "#999" : "#e4e4e4", "stroke-dasharray": t === 1 ? "3 3" : "" }));
      svg.append(svgEl(doc, "text", { x: x0 - 4, y: y(t) + 3.5, "text-anchor": "end", "font-size": 10, fill: "#555" }, fmt(t, 1)));
    }
    for (const e of [1, 10, 100, 1000, 10000].filter((e) => e <= total)) {
      svg.append(svgEl(doc, "text", { x: curveX(e, total, x0, x1), y: H - 20, "text-anchor": "middle", "font-size": 10, fill: "#555" }, String(e)));
    }
    svg.append(svgEl(doc, "text", { x: (x0 + x1) / 2, y: H - 6, "text-anchor": "middle", "font-size": 10, fill: "#333" }, "edges kept (log) → faithfulness"));
    const pts = xs.map((e, i) => `${curveX(e, total, x0, x1).toFixed(1)},${y(ys[i] as number).toFixed(1)}`);
    svg.append(svgEl(doc, "polyline", { points: pts.join(" "), fill: "none", stroke: "#0072B2", "stroke-width": 1.5 }));
    xs.forEach((e, i) => {
      const dot = svgEl(doc, "circle", { cx: curveX(e, total, x0, x1), cy: y(ys[i] as number), r: 3, fill: "#0072B2", class: "cw-curve-point", "data-cw-size": e });
      svgTitle(doc, dot, `${e} edges: faithfulness ${fmt(ys[i] as number, 3)}`);
      svg.append(dot);
    });
    const mx = curveX(n, total, x0, x1);
    svg.append(svgEl(doc, "line", { x1: mx, x2: mx, y1: 8, y2: H - 32, stroke: "#111", "stroke-width": 1.5, class: "cw-curve-marker", "data-cw-size": n }));
    const at = curveValueAt(xs, ys, n);
    svg.append(svgEl(doc, "text", { x: Math.min(mx + 4, x1 - 60), y: 10, "font-size": 10, fill: "#111", class: "cw-curve-label" }, at === null ? `${n} edges` : `${n} edges: ${fmt(at, 3)}`));
    return svg;
  }

  function status(): void {
    if (data === null) return;
    if (hovered !== null) {
      panel.status.textContent = hovered;
      return;
    }
    const sel = num(m.get("selected_node"));
    const what = sel >= 0 ? `${data.labels[sel] ?? sel} selected` : "Nothing selected";
    panel.status.textContent = `${what}; hover a node or an edge for its weight, click a node to select it`;
  }

  const frame = perFrame(draw);
  cleanups.push(redrawOnResize(root, frame));
  cleanups.push(
    listen(slider, "input", () => {
      setTraits(m, { size: Number(slider.value) });
      frame.schedule();
    }),
    listen(plot, "click", (event) => {
      const g = (event.target as Element | null)?.closest?.("[data-cw-node]");
      if (!g || data === null) return;
      const i = Number(g.getAttribute("data-cw-node"));
      const kind = data.nodes.kind[i] ?? "";
      const patch: Partial<GraphTraits> = { selected_node: i };
      if (kind.startsWith("head")) Object.assign(patch, { selected_layer: data.nodes.layer[i], selected_head: data.nodes.index[i] });
      setTraits(m, patch);
      hovered = null; // (say what the click selected, not what the pointer is over)
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const target = event.target as Element | null;
      const g = target?.closest?.("[data-cw-node]");
      const edge = target?.closest?.("[data-cw-edge]");
      const title = (g ?? edge)?.querySelector?.("title")?.textContent ?? null;
      if (title === hovered) return;
      hovered = title;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      status();
    }),
  );

  return runView(
    m,
    panel,
    frame,
    cleanups,
    {
      data: ["node_kind", "node_label", "node_layer", "node_pos", "node_index", "edge_src", "edge_dst", "edge_weight"],
      redraw: ["prompt", "curve_edges", "curve_values", "curve_note", "title", "metric", "caption", "negative_note", "positive_note", "model_name", "size", "selected_node", "selected_layer", "selected_head"],
    },
    load,
    draw,
  );
}
