// CompositionMap view: Q, K and V composition scores between every earlier and
// later head, as three zoomable heatmaps (views/composition/maps.ts) and as a
// graph of the strongest edges (views/composition/graph.ts).
//
// Kernel → view: scores [3, L, H, L, H] (raw), baseline_value, and for maps of
// other pair scores (path patching) a title and a note. View → kernel:
// subtract_baseline, kind (edges drawn), n_edges, selected_layer/head,
// selected_edge ([l1, h1, l2, h2] or []), edge_kind.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { compWords, type CompWords, hasValues, toCompData } from "../lib/composition";
import { el, listen } from "../lib/dom";
import { noExport } from "../lib/export";
import { type CompData, compValue, countEdgesAbove, edgeFloor, edgeOfSelection, edgeOr, edgeWidth, type Kind, KIND_STYLE, KINDS, nearestEdge, parseEdgeId } from "../lib/graph";
import { offsetControl } from "../lib/offset";
import { clearError, makePanel, redrawOnResize, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { fmt, headName, svgEl } from "../lib/svg";
import { type DrawnGraph, drawGraph, EDGE_PICK_PX, type GraphSelection, graphEdges } from "./composition/graph";
import { compositionMaps } from "./composition/maps";
import "../styles/composition.css";

export interface CompositionTraits {
  [key: string]: unknown;
  model_name: string;
  scores: WireArray;
  baseline_value: number;
  edge_threshold?: number;
  threshold_label?: string;
  title?: string;
  note?: string;
  subtract_baseline: boolean;
  kind: string;
  n_edges: number;
  selected_layer: number;
  selected_head: number;
  selected_edge: number[];
  edge_kind: string;
}

type Model = AnyModel<CompositionTraits>;

/** Edge counts offered (the kernel accepts 1–200; its default, 12, reads well at any size). */
const EDGE_COUNTS = [6, 12, 24, 48, 96];
const DEFAULT_EDGES = 12;
/** The gaps between the graph and the maps' column, and between two maps (composition.css). */
const BODY_GAP_PX = 22;
const MAP_GAP_PX = 14;

export function renderComposition({ model, el: root }: RenderProps<CompositionTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "composition", "cw-composition");
  const cleanups: (() => void)[] = [];
  let data: CompData | null = null;

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
  countSelect.title = "How many of the strongest edges the graph draws";
  const countLabel = el(doc, "label", undefined, "strongest ");
  countLabel.append(countSelect);
  panel.controls.append(kindControl.element, countLabel, baselineLabel);
  cleanups.push(kindControl.cleanup);
  cleanups.push(offsetControl(doc, m as unknown as AnyModel<Record<string, unknown>>, panel.controls));

  const graphBox = el(doc, "div", "cw-graph");
  const graphNote = el(doc, "div", "cw-graph-note");
  const graphColumn = el(doc, "div", "cw-graph-column");
  graphColumn.append(graphBox, graphNote);
  const maps = compositionMaps(doc, { selectEdge });
  panel.body.append(graphColumn, maps.element);
  cleanups.push(maps.cleanup);
  /** The edges drawn in the graph and their curves (graph coordinates), for picking the nearest. */
  let drawn: DrawnGraph["edges"] = [];
  const keys = el(doc, "div", "cw-keys");
  // which edges the graph draws and what their width means (the threshold, in the kernel's words)
  const edgeKey = el(doc, "div", "cw-edge-key");
  maps.legend.append(keys, edgeKey);
  const note = el(doc, "div", "cw-note");
  // the caller's note (how a causal map was made), as text, kept in exports
  const userNote = el(doc, "div", "cw-note cw-caption");
  userNote.dataset.cwNote = "";
  panel.body.after(note, userNote);

  /** The legend under the graph: each kind's line style, in the view's words. */
  function drawKeys(d: CompData, words: CompWords, titled: boolean): void {
    // (a titled map leaves out the kinds it has no values of: a path-patching map of k alone)
    const kinds = titled ? KINDS.filter((_, k) => hasValues(d, k)) : KINDS;
    keys.replaceChildren(
      ...kinds.map((k) => {
        const item = el(doc, "span");
        const svg = svgEl(doc, "svg", { width: 26, height: 10, style: "display:inline-block;vertical-align:middle;margin-right:4px" });
        svg.append(svgEl(doc, "line", { x1: 1, x2: 25, y1: 5, y2: 5, stroke: KIND_STYLE[k].colour, "stroke-width": 2.5, "stroke-dasharray": KIND_STYLE[k].dash }));
        item.append(svg, doc.createTextNode(words.keyLabel(k)));
        return item;
      }),
    );
  }

  function words(d: CompData): CompWords {
    return compWords(String(m.get("title") ?? ""), subtract(), d.baseline);
  }

  function subtract(): boolean {
    return m.get("subtract_baseline") !== false;
  }

  function edgeCount(): number {
    const n = Number(m.get("n_edges"));
    return Number.isInteger(n) && n > 0 ? n : DEFAULT_EDGES;
  }

  function selection(d: CompData): GraphSelection {
    const layer = indexOr(m.get("selected_layer"), d.nLayers, 0);
    const head = indexOr(m.get("selected_head"), d.nHeads, 0);
    return {
      layer,
      head,
      edge: edgeOfSelection(edgeOr(m.get("selected_edge"), d.nLayers, d.nHeads), layer, head),
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
    maps.load(data, words(data));
  }

  /** The offered counts, with the kernel's own value among them when it is another (so the control never misstates it). */
  function updateCount(): void {
    const n = edgeCount();
    const counts = [...new Set([...EDGE_COUNTS, n])].sort((a, b) => a - b);
    if (countSelect.options.length !== counts.length || [...countSelect.options].some((o, i) => o.value !== String(counts[i]))) {
      countSelect.replaceChildren(...counts.map((c) => el(doc, "option", undefined, String(c))));
    }
    countSelect.value = String(n);
  }

  function draw(): void {
    const d = data;
    if (d === null) return;
    const sel = selection(d);
    const sub = subtract();
    const w = words(d);
    const titled = String(m.get("title") ?? "") !== "";
    setTitle(panel, w.heading, String(m.get("model_name") ?? ""));
    drawKeys(d, w, titled);
    for (const b of kindControl.element.querySelectorAll<HTMLButtonElement>("button[data-value]")) {
      const kind = b.dataset.value as Kind;
      if ((KINDS as readonly string[]).includes(kind)) b.title = w.keyLabel(kind);
    }
    const kindValue = String(m.get("kind") ?? "all");
    kindControl.update(kindValue);
    baselineBox.checked = sub;
    // (a titled map with no baseline has nothing to subtract)
    baselineLabel.style.display = titled && d.baseline === 0 ? "none" : "";
    updateCount();
    maps.draw(d, sel, sub, w);
    const kinds: Kind[] = (KINDS as readonly string[]).includes(kindValue) ? [kindValue as Kind] : [...KINDS];
    const floor = edgeFloor(Number(m.get("edge_threshold") ?? 0), d.baseline, sub);
    const edges = graphEdges(d, kinds, edgeCount(), sub, sel, floor);
    drawEdgeKey(d, kinds, sub, floor, edges, w);
    const graph = drawGraph(doc, d, edges, sel, w);
    drawn = graph.edges;
    graphBox.replaceChildren(graph.svg);
    arrange(); // (with the graph drawn: its width decides)
    graphNote.textContent = graph.hidden > 0 ? `The ${edges.length} strongest edges; only the heads they join (and the selected head) are drawn, ${graph.hidden} others are not.` : "";
    note.textContent = titled
      ? `${sub && d.baseline !== 0 ? `Values minus ${fmt(d.baseline, 3)}. ` : ""}Maps: rows earlier heads, columns later heads; the graph draws the largest positive values.`
      : sub
      ? `Scores ‖W_A W_B‖ / (‖W_A‖ ‖W_B‖) minus ${fmt(d.baseline, 3)}, the expected score of random matrices (blue below, red above). Maps: rows earlier heads, columns later heads.`
      : "Scores ‖W_A W_B‖ / (‖W_A‖ ‖W_B‖), raw. Maps: rows earlier heads, columns later heads.";
    note.append(noExport(el(doc, "span", undefined, " Click an edge, a cell or a head; hover a cell for its value.")));
    userNote.textContent = String(m.get("note") ?? "");
    if (sel.edge) {
      const [l1, h1, l2, h2] = sel.edge;
      const k = KINDS.indexOf(sel.edgeKind as Kind);
      const value = k >= 0 ? ` (${titled ? `via ${sel.edgeKind.toLowerCase()}` : sel.edgeKind}, ${w.value(compValue(d, k, l1, h1, l2, h2, sub))})` : "";
      panel.status.textContent = `Edge ${headName(l1, h1)} → ${headName(l2, h2)}${value} selected; ${headName(sel.layer, sel.head)} selected`;
    } else {
      panel.status.textContent = `${headName(sel.layer, sel.head)} selected`;
    }
  }

  /** The legend of the graph's edges: how many clear the threshold (and what it is), and what width means. */
  function drawEdgeKey(d: CompData, kinds: Kind[], sub: boolean, floor: number, edges: { value: number }[], w: CompWords): void {
    const threshold = Number(m.get("edge_threshold") ?? 0);
    const label = String(m.get("threshold_label") ?? "");
    const above = countEdgesAbove(d, kinds, sub, floor);
    const drawn = Math.min(above, edgeCount());
    const edgesWord = (n: number) => `${n} ${n === 1 ? "edge" : "edges"}`;
    const which = drawn < above ? `the top ${drawn} of the ${edgesWord(above)}` : `all ${edgesWord(above)}`;
    const line = el(doc, "div", "cw-edge-threshold");
    line.textContent =
      threshold > 0
        ? `Graph: ${which} scoring at least ${w.value(floor)} (threshold: ${label || `raw score ${fmt(threshold, 3)}`}).`
        : `Graph: ${which} ${sub && d.baseline !== 0 ? "above the random baseline" : "with a positive value"} (no threshold).`;
    const values = edges.map((e) => e.value).filter((v) => v > 0);
    const max = Math.max(0, ...values);
    const widths = el(doc, "div", "cw-edge-widths");
    if (values.length > 0) {
      const min = Math.min(...values);
      const sample = (v: number) => {
        const svg = svgEl(doc, "svg", { width: 26, height: 10, style: "display:inline-block;vertical-align:middle;margin:0 4px" });
        svg.append(svgEl(doc, "line", { x1: 1, x2: 25, y1: 5, y2: 5, stroke: "#555", "stroke-width": edgeWidth(v, max), "stroke-linecap": "round" }));
        return svg;
      };
      const unit = sub && d.baseline !== 0 ? " above baseline" : "";
      widths.append(doc.createTextNode("Width and shade:"), sample(min), doc.createTextNode(fmt(min, 3)), sample(max), doc.createTextNode(`${fmt(max, 3)}${unit}`));
    }
    edgeKey.replaceChildren(line, widths);
  }

  const frame = perFrame(draw);
  cleanups.push(redrawOnResize(panel.body, frame));

  /** The maps stand in their own column beside the graph when two fit side by side there (three maps and the
   * legend in a 2 × 2); otherwise the graph, the maps and the legend share one flow (`cw-flow`, composition.css). */
  function arrange(): void {
    const canvas = maps.element.querySelector("canvas");
    const mapWidth = canvas === null ? 0 : parseFloat(canvas.style.width) || 0;
    const room = panel.body.clientWidth - graphColumn.offsetWidth - BODY_GAP_PX;
    panel.body.classList.toggle("cw-flow", mapWidth > 0 && room < 2 * mapWidth + MAP_GAP_PX);
  }

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
      if (node) {
        const [layer, head] = (node.getAttribute("data-cw-head") ?? "").split(".").map(Number);
        setTraits(m, { selected_layer: layer as number, selected_head: head as number });
        frame.schedule();
        return;
      }
      // the edge whose curve is nearest the pointer (at a crossing, the one the pointer is closer to)
      const p = graphPoint(event);
      const i = p === null ? -1 : nearestEdge(p, drawn.map((g) => g.points), EDGE_PICK_PX);
      const hit = drawn[i]?.edge;
      if (hit) {
        selectEdge(hit.l1, hit.h1, hit.l2, hit.h2, hit.kind);
        return;
      }
      const edge = target?.closest?.("[data-cw-edge]");
      const parsed = edge ? parseEdgeId(edge.getAttribute("data-cw-edge") ?? "") : null;
      if (edge && parsed) selectEdge(...parsed, edge.getAttribute("data-cw-kind") ?? "");
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

  return runView(m, panel, frame, cleanups, { data: ["scores", "baseline_value", "title"], redraw: ["note", "edge_threshold", "threshold_label", "subtract_baseline", "kind", "n_edges", "selected_layer", "selected_head", "selected_edge", "edge_kind", "model_name"] }, load, draw);
}
