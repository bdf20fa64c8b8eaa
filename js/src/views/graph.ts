// AttributionGraph view: a graph of a model's computation. Component graphs (edge attribution): a size slider
// prunes by edge count, beside the faithfulness curve. Attribution graphs (graph/read.ts, lib/graphread.ts):
// pruned by cumulative influence (node and edge thresholds), positions as columns and layers as rows with no
// overlapping nodes, a label under every feature (editable), a logit's token and probability, the scores; a
// click highlights a node's edges; interventions on the selection beside the graph's prediction. A click
// selects a node (its head, token and feature in linked views); shift-click pins, pins group into supernodes.
// Traits: graph/traits.ts. Drawn in SVG (a large graph by level of detail: graph/lod.ts); labels set as text.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import type { GraphTraits } from "./graph/traits";
import { el, listen } from "../lib/dom";
import { drawnId, groupPins, scaleByInfluence, parsePinned, parseSupernodes, togglePin, ungroup, type Supernode } from "../lib/graphpins";
import { nodeWeights, SVG_EDGES } from "../lib/graphlod";
import { keptByInfluence, readableLayout, shownNodes } from "../lib/graphread";
import { edgeColour, edgePath, edgeWidth, INPUT_KINDS, keptEdges, layoutGraph, shortLabel, type GraphLayout, type GraphNodes, type Placed } from "../lib/graphview";
import { clearError, makePanel, redrawOnResize, runView, setTitle, showError } from "../lib/panel";
import { onTraits, perFrame, setTraits } from "../lib/selection";
import { fmt, svgEl, svgTitle } from "../lib/svg";
import { visibleLabel, visibleToken } from "../lib/tokens";
import "../styles/graph.css";
import { card, type Contexts } from "./graph/card";
import { lodRenderer } from "./graph/lod";
import { nodeOfFeature, selectionOf } from "./graph/select";
import { groupList, pinControls } from "./graph/pins";
import { curve, legend, PIN } from "./graph/side";
import { drawPinned } from "./graph/subgraph";
import { highlightInPlace, nodeCaption, parseResults, readControls, showThresholds, steerPanel } from "./graph/read";


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
  influence: ArrayLike<number>;
  activation: ArrayLike<number>;
  ctx: Contexts;
  /** Attribution graphs: cumulative influence shares (null: prune by edge count). */
  share: { node: ArrayLike<number>; edge: ArrayLike<number> } | null;
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
  const pins = pinControls(doc);
  const zoomBar = el(doc, "span", "cw-graph-zoom");
  const read = readControls(doc);
  panel.controls.append(sliderLabel, read.root, zoomBar, pins.root);
  const row = el(doc, "div", "cw-graph-row");
  const plot = el(doc, "div", "cw-plot cw-scroll");
  const side = el(doc, "div", "cw-graph-side");
  const legendSlot = el(doc, "div");
  const cardSlot = el(doc, "div");
  const groupSlot = el(doc, "div");
  const curveSlot = el(doc, "div");
  const steerSlot = el(doc, "div");
  side.append(legendSlot, steerSlot, cardSlot, groupSlot, curveSlot);
  row.append(plot, side);
  const note = el(doc, "div", "cw-note cw-caption");
  const lodNote = el(doc, "div", "cw-note cw-graph-lod-note");
  lodNote.dataset.cwLod = "";
  panel.body.append(row, lodNote, note);
  const lod = lodRenderer(doc, plot, lodNote, zoomBar);
  lod.hide();
  let data: Data | null = null;
  let hovered: string | null = null;
  let [hoveredNode, clerpsNow, drawnSig] = [-1, [] as string[], ""]; // (the labels, read once per draw)
  let kept: { n: number; edges: boolean[]; into: Float64Array; out: Float64Array; max: number } | null = null;
  const cleanups: (() => void)[] = [lod.cleanup];

  function load(): void {
    try {
      const int = (name: keyof GraphTraits) => decodeArray(m.get(name) as WireArray).data;
      const optional = (name: keyof GraphTraits) => (m.get(name) ? decodeArray(m.get(name) as WireArray) : null);
      const nodes: GraphNodes = { kind: strings(m.get("node_kind")), layer: int("node_layer"), pos: int("node_pos"), index: int("node_index") };
      const src = int("edge_src");
      const dst = int("edge_dst");
      const weight = int("edge_weight");
      if (src.length !== dst.length || src.length !== weight.length) throw new Error("circuitwidgets: edge_src, edge_dst and edge_weight differ in length");
      const n = nodes.kind.length;
      const column = (name: keyof GraphTraits) => optional(name)?.data ?? new Float32Array(n).fill(NaN);
      const ctx: Contexts = { vocab: strings(m.get("ctx_vocab")), tokens: optional("ctx_tokens"), value: optional("ctx_value"), centre: num(m.get("ctx_centre"), 0) };
      [kept, drawnSig] = [null, ""];
      const edgeShare = optional("edge_share")?.data;
      const share = edgeShare && edgeShare.length === src.length && (src.length === 1 || (edgeShare[src.length - 1] as number) > 0) ? { node: column("node_share"), edge: edgeShare } : null;
      data = { nodes, labels: strings(m.get("node_label")).map(visibleLabel), src, dst, weight, influence: column("node_influence"), activation: column("node_activation"), ctx, share };
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  const size = (): number => Math.max(0, Math.min(num(m.get("size"), 0), data?.src.length ?? 0));
  const pinned = (): number[] => parsePinned(m.get("pinned"));
  const groups = (): Supernode[] => parseSupernodes(m.get("supernodes"));

  /** The first `n` edges' circuit (dangling ones dropped), each node's |weight| in and out, the widest: once per size. */
  const threshold = (name: "node_threshold" | "edge_threshold", fallback: number): number => (Number(m.get(name)) > 0 ? Number(m.get(name)) : fallback);
  function keptAt(n: number): NonNullable<typeof kept> {
    const key = data?.share ? n + 2 * threshold("node_threshold", 0.8) + 4 * threshold("edge_threshold", 0.98) : n;
    if (kept !== null && kept.n === key) return kept;
    const { nodes, src, dst, weight, share } = data as Data;
    const edges = share ? keptByInfluence(nodes, src, dst, share.node, share.edge, threshold("node_threshold", 0.8), threshold("edge_threshold", 0.98), n) : keptEdges(nodes, src, dst, n);
    let max = 0;
    for (let e = 0; e < n; e++) if (edges[e]) max = Math.max(max, Math.abs(weight[e] as number));
    kept = { n: key, edges, max, ...nodeWeights(nodes.kind.length, src, dst, weight, n) };
    return kept;
  }

  function draw(): void {
    setTitle(panel, String(m.get("title") || "Graph"), String(m.get("model_name") ?? "")), (clerpsNow = strings(m.get("node_clerp")));
    if (data === null) {
      plot.replaceChildren();
      for (const slot of [legendSlot, cardSlot, groupSlot, curveSlot]) slot.replaceChildren();
      return;
    }
    // a new selection alone (a click) on a drawn attribution graph: restyle in place, not a new drawing
    const sig = data.share ? [size(), m.get("node_threshold"), m.get("edge_threshold"), pinned().join(), JSON.stringify(groups()), m.get("subgraph_only"), root.clientWidth, clerpsNow.join("\u0000"), JSON.stringify(m.get("interventions"))].join("|") : "";
    if (sig && sig === drawnSig && !m.get("subgraph_only") && plot.querySelector("svg.cw-graph-svg")) {
      highlightInPlace(plot, num(m.get("selected_node")), data.src, data.dst, new Set(pinned()), num(m.get("selected_dest")), PIN);
      pins.pin.textContent = pinned().includes(num(m.get("selected_node"))) ? "Unpin selected" : "Pin selected";
      return void (steerSlot.replaceChildren(steer()), status());
    }
    drawnSig = sig;
    const { nodes, src } = data;
    const n = size();
    slider.max = String(src.length);
    slider.value = String(n);
    const plotPx = Math.max(420, (root.clientWidth || 900) - 300);
    const tokens = strings(m.get("prompt")).map((t) => visibleToken(t));
    sliderLabel.hidden = data.share !== null;
    read.root.hidden = data.share === null;
    const circuit = keptAt(n);
    const layout = data.share ? readableLayout(nodes, shownNodes(circuit.edges, data.src, data.dst, data.nodes.kind, pinned()), tokens) : layoutGraph(nodes, plotPx, tokens);
    if (!data.share) scaleByInfluence(layout.nodes, data.influence);
    const only = Boolean(m.get("subgraph_only")) && (pinned().length > 0 || groups().length > 0);
    pins.only.checked = Boolean(m.get("subgraph_only"));
    pins.pin.textContent = pinned().includes(num(m.get("selected_node"))) ? "Unpin selected" : "Pin selected";
    const perPosition = Array.from(nodes.pos).some((p) => p >= 0);
    const drawnCount = circuit.edges.filter(Boolean).length;
    let max = circuit.max;
    showThresholds(read, threshold("node_threshold", 0.8), threshold("edge_threshold", 0.98), drawnCount, String(m.get("scores_line") ?? ""));
    if (!only && ((perPosition && !data.share && layout.width > 1.5 * plotPx) || drawnCount > SVG_EDGES)) {
      // level of detail: too wide or too many edges for one SVG element each (views/graph/lod.ts)
      sliderText.textContent = ` ${n} of ${src.length} (${drawnCount} drawn: edges on a path from the input to the logits)`;
      const dest = num(m.get("selected_dest"));
      lod.show({ layout, nodes, perPosition, src, dst: data.dst, weight: data.weight, kept: circuit.edges, total: src.length, max, influence: data.influence, pinned: new Set(pinned()), selected: num(m.get("selected_node")), dest, rowName: (layer) => rowName(layer), nodeEl: (i, p, active, isPinned) => nodeEl(i, p, active, isPinned, groups()) }, plotPx - 30);
    } else {
      lod.hide();
      const svg = svgEl(doc, "svg", { width: layout.width, height: layout.height, viewBox: `0 0 ${layout.width} ${layout.height}`, class: "cw-graph-svg", role: "img" });
      axes(svg, layout);
      max = only ? drawPinned(svg, layout, { doc, src: data.src, dst: data.dst, weight: data.weight, labels: data.labels, pinned: pinned(), grouped: groups(), say: (t) => (sliderText.textContent = t), edgeEl, nodeEl }) : drawFull(svg, layout, n, circuit.edges, drawnCount);
      plot.replaceChildren(svg);
    }
    steerSlot.replaceChildren(steer());
    legendSlot.replaceChildren(legend(doc, max, String(m.get("negative_note") ?? "negative"), String(m.get("positive_note") ?? "positive"), Array.from(data.nodes.pos).some((p) => p >= 0)));
    // (an attribution graph's nodes each have a slot of one size: influence is in the hover card)
    if (data.share) legendSlot.querySelectorAll("text").forEach((t) => t.textContent?.startsWith("node size") && (t.textContent = "one slot per node: hover for its influence"));
    cardSlot.replaceChildren(hoverCard());
    groupSlot.replaceChildren(groupList(doc, groups(), pinned().length, data.labels));
    curveSlot.replaceChildren(data.share ? "" : curve(doc, numbers(m.get("curve_edges")), numbers(m.get("curve_values")), n, src.length));
    note.textContent = `${String(m.get("caption") ?? "")}. ${String(m.get("curve_note") ?? "")}`.trim();
    status();
  }

  function axes(svg: SVGSVGElement, layout: GraphLayout): void {
    if (data === null) return;
    for (const r of layout.rows) svg.append(svgEl(doc, "text", { x: 6, y: r.y + 4, "font-size": 11, fill: "#555" }, rowName(r.layer)));
    const dest = num(m.get("selected_dest"));
    const [perPosition, up, y] = [Array.from(data.nodes.pos).some((p) => p >= 0), data.share !== null, layout.height - (data.share ? 4 : 6)];
    layout.columns.forEach((c, k) => {
      const chosen = perPosition && k === dest; // (an attribution graph's tokens run upwards: narrow columns fit)
      if (!c.label) return;
      svg.append(svgEl(doc, "text", { x: c.x + (up ? 3.5 : 0), y, "text-anchor": up ? "start" : "middle", transform: up ? `rotate(-90 ${c.x + 3.5} ${y})` : null, "font-size": 10, fill: chosen ? "#111" : "#777", "font-weight": chosen ? "bold" : null, "data-cw-column": k }, c.label));
    });
  }

  function rowName(layer: number): string {
    const { nodes } = data as Data;
    return layer < 0 ? "embed" : nodes.kind.some((k, i) => k === "logit" && nodes.layer[i] === layer) ? "logits" : `L${layer}`;
  }

  function edgeEl(from: Placed, to: Placed, w: number, max: number, title: string, e: number | string): SVGPathElement {
    const path = svgEl(doc, "path", { d: edgePath(from, to), fill: "none", stroke: edgeColour(w), "stroke-width": edgeWidth(w, max), "stroke-opacity": 0.75, class: "cw-edge", "data-cw-edge": e });
    svgTitle(doc, path, `${title}: ${fmt(w, 3)}`);
    return path;
  }

  function drawFull(svg: SVGSVGElement, layout: GraphLayout, n: number, kept: readonly boolean[], drawnCount: number): number {
    if (data === null) return 0;
    const { nodes, labels, src, dst, weight } = data;
    sliderText.textContent = ` ${n} of ${src.length} (${drawnCount} drawn: edges on a path from the input to the logits)`;
    svgTitle(doc, svg, `${String(m.get("title") ?? "graph")}: ${drawnCount} edges`);
    const max = keptAt(n).max;
    const edges = svgEl(doc, "g", { class: "cw-edges" });
    const sel = data.share ? num(m.get("selected_node")) : -1;
    const near = new Set<number>([sel]);
    for (let e = n - 1; e >= 0; e--) {
      // weakest first, so the strongest edges are drawn on top
      const from = layout.nodes[src[e] as number];
      const to = layout.nodes[dst[e] as number];
      if (!kept[e] || !from || !to) continue;
      const path = edgeEl(from, to, weight[e] as number, max, `${labels[src[e] as number]} → ${labels[dst[e] as number]}`, e);
      if (sel >= 0 && src[e] !== sel && dst[e] !== sel) path.setAttribute("stroke-opacity", "0.08"), (path.dataset.cwDim = "");
      else if (sel >= 0) near.add(src[e] as number).add(dst[e] as number);
      edges.append(path);
    }
    svg.append(edges);
    const shown = new Set<number>();
    for (let e = 0; e < n; e++) if (kept[e]) shown.add(src[e] as number).add(dst[e] as number);
    const dots = svgEl(doc, "g", { class: "cw-nodes" });
    const pin = new Set(pinned());
    const grouped = groups();
    nodes.kind.forEach((_, i) => {
      const p = layout.nodes[i];
      if (!p) return;
      const dot = nodeEl(i, p, shown.has(i) || pin.has(i), pin.has(i), grouped);
      if (sel >= 0 && !near.has(i)) dot.setAttribute("opacity", "0.3"), (dot.dataset.cwDim = "");
      dots.append(dot);
    });
    svg.append(dots);
    return max;
  }

  function nodeEl(i: number, p: Placed, active: boolean, isPinned: boolean, grouped: readonly Supernode[]): SVGGElement {
    const { nodes, labels } = data as Data;
    const kind = nodes.kind[i] ?? "";
    const g = svgEl(doc, "g", { class: "cw-node", "data-cw-node": i, "data-cw-kind": kind });
    if (INPUT_KINDS.has(kind)) {
      g.append(svgEl(doc, "text", { x: p.x, y: p.y + 8, "text-anchor": "middle", "font-size": 8, fill: active ? "#333" : "#bbb" }, kind.slice(-1)));
      g.append(svgEl(doc, "rect", { x: p.x - 4, y: p.y - 2, width: 8, height: 12, fill: "transparent" }));
    } else {
      const selected = i === num(m.get("selected_node")) || (kind === "head" && nodes.layer[i] === num(m.get("selected_layer")) && nodes.index[i] === num(m.get("selected_head")));
      const shape = kind === "mlp" || kind === "logit" || kind === "embedding"
        ? svgEl(doc, "rect", { x: p.x - p.r * 1.3, y: p.y - p.r, width: p.r * 2.6, height: p.r * 2, rx: 3 })
        : svgEl(doc, "circle", { cx: p.x, cy: p.y, r: p.r });
      const group = drawnId(grouped, i);
      shape.setAttribute("fill", group.startsWith("g") ? "#fdf2d9" : active ? "#f4f4f4" : "#fbfbfb");
      shape.setAttribute("stroke", selected ? "#111" : isPinned ? PIN : active ? "#666" : "#ccc");
      shape.setAttribute("stroke-width", selected || isPinned ? "2.5" : "1");
      g.append(shape);
      if (selected) g.dataset.cwSelected = "";
      if (isPinned) g.dataset.cwPinned = "";
      if (group.startsWith("g")) g.dataset.cwInGroup = group.slice(1);
      const perPosition = (nodes.pos[i] as number) >= 0;
      const short = shortLabel(kind, labels[i] ?? "", nodes.index[i] as number, perPosition);
      const y = perPosition ? p.y - p.r - 3 : p.y + 3.5; // (a logit's token above it, slanted)
      const slant = perPosition ? `rotate(-40 ${p.x} ${y})` : null;
      const caption = data?.share ? nodeCaption(doc, kind, p, clerpsNow[i] ?? "", labels[i] ?? "", (data.activation[i] as number) ?? NaN, active) : null;
      if (caption) g.append(caption);
      else if (short && (p.r >= 8 || kind !== "head")) g.append(svgEl(doc, "text", { x: p.x, y, "text-anchor": perPosition ? "start" : "middle", transform: slant, "font-size": 9, fill: active ? "#222" : "#aaa", "pointer-events": "none" }, short));
    }
    svgTitle(doc, g, describeNode(i));
    return g;
  }

  function describeNode(i: number): string {
    if (data === null) return "";
    const { into, out } = keptAt(size());
    return `${data.labels[i] ?? i}: |weight| in ${fmt(into[i] as number, 3)}, out ${fmt(out[i] as number, 3)} (kept edges)`;
  }

  function hoverCard(): HTMLElement {
    if (data === null || hoveredNode < 0 || hoveredNode >= data.nodes.kind.length) return card(doc, null, -1, data?.ctx ?? { vocab: [], tokens: null, value: null, centre: 0 });
    const i = hoveredNode;
    const pos = data.nodes.pos[i] as number;
    return card(doc, { label: data.labels[i] ?? String(i), kind: data.nodes.kind[i] ?? "", activation: data.activation[i] as number, influence: data.influence[i] as number, clerp: strings(m.get("node_clerp"))[i] ?? "", token: pos >= 0 ? visibleToken(strings(m.get("prompt"))[pos] ?? "") : undefined, pos }, i, data.ctx);
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

  /** The selection's label editor and interventions: the selected node, or the supernode it belongs to. */
  function steer(): HTMLElement {
    const { nodes, labels } = data as Data;
    const sel = num(m.get("selected_node"));
    const group = groups().find((g) => g.nodes.includes(sel));
    const rows = (group ? group.nodes : sel >= 0 ? [sel] : []).filter((i) => nodes.kind[i] === "feature");
    const clerps = strings(m.get("node_clerp"));
    const name = group ? group.label : clerps[sel] || labels[sel] || "";
    return steerPanel(doc, { rows, name, live: Boolean(m.get("can_intervene")) && m.get("__offline__" as never) !== true, results: parseResults(m.get("interventions")), labels, clerps,
      request: (mode, value) => setTraits(m, { intervention_request: { rows, mode, value, id: Date.now() } }),
      rename: (text) => setTraits(m, { node_clerp: clerps.map((c, i) => (i === sel ? text : c)) }),
    });
  }

  /** Select node `i`: its head, its token and, for a feature of the linked site, the feature. */
  function select(i: number): void {
    if (data !== null) setTraits(m, selectionOf(data.nodes, i, { nTokens: strings(m.get("prompt")).length, layer: num(m.get("site_layer")), nFeatures: num(m.get("n_site_features"), 0) }) as Partial<GraphTraits>);
  }

  function setPin(i: number): void {
    setTraits(m, togglePin(pinned(), groups(), i));
  }

  /** A feature chosen elsewhere (a linked dashboard): select its node, the most influential one, if the graph has it. */
  function followFeature(): void {
    const best = data === null ? -1 : nodeOfFeature(data.nodes, data.influence, num(m.get("site_layer")), num(m.get("selected_feature")), num(m.get("selected_node")));
    if (best >= 0) setTraits(m, { selected_node: best });
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
      if (event.shiftKey) setPin(i);
      else select(i);
      hovered = null; // (say what the click selected, not what the pointer is over)
      frame.schedule();
    }),
    listen(read.node, "input", () => setTraits(m, { node_threshold: Number(read.node.value) })),
    listen(read.edge, "input", () => setTraits(m, { edge_threshold: Number(read.edge.value) })),
    listen(pins.pin, "click", () => {
      const i = num(m.get("selected_node"));
      if (data !== null && i >= 0 && i < data.nodes.kind.length) setPin(i);
    }),
    listen(pins.group, "click", () => {
      const next = groupPins(pinned(), groups(), pins.label.value.slice(0, 120));
      if (next === null) {
        panel.status.textContent = pins.label.value.trim() ? "Pin nodes first: every pinned node is already in a supernode" : "Type a label for the supernode first";
        return;
      }
      setTraits(m, { supernodes: next });
      pins.label.value = "";
    }),
    listen(pins.only, "change", () => setTraits(m, { subgraph_only: pins.only.checked })),
    listen(groupSlot, "click", (event) => {
      const k = (event.target as Element | null)?.closest?.("[data-cw-ungroup]")?.getAttribute("data-cw-ungroup");
      if (k !== null && k !== undefined) setTraits(m, { supernodes: ungroup(groups(), Number(k)) });
    }),
    listen(plot, "mouseover", (event) => {
      const target = event.target as Element | null;
      const g = target?.closest?.("[data-cw-node]");
      const edge = target?.closest?.("[data-cw-edge], [data-cw-supernode-node]");
      const text = (g ?? edge)?.querySelector?.("title")?.textContent ?? null;
      const node = g ? Number(g.getAttribute("data-cw-node")) : -1;
      if (node >= 0 && node !== hoveredNode) {
        hoveredNode = node;
        cardSlot.replaceChildren(hoverCard());
      }
      const title = text !== null && node >= 0 && node === num(m.get("selected_node")) ? `${text} (selected)` : text;
      if (title === hovered) return;
      hovered = title;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      status();
    }),
    onTraits(m, ["selected_feature"], followFeature),
  );

  return runView(
    m,
    panel,
    frame,
    cleanups,
    {
      data: ["node_kind", "node_label", "node_layer", "node_pos", "node_index", "node_influence", "node_activation", "edge_src", "edge_dst", "edge_weight", "ctx_vocab", "ctx_tokens", "ctx_value", "ctx_centre", "node_share", "edge_share"],
      redraw: ["prompt", "curve_edges", "curve_values", "curve_note", "title", "metric", "caption", "negative_note", "positive_note", "model_name", "size", "selected_node", "selected_layer", "selected_head", "selected_dest", "pinned", "supernodes", "subgraph_only", "scores_line", "can_intervene", "node_threshold", "edge_threshold", "node_clerp", "interventions"],
    },
    load,
    draw,
  );
}
