// CompositionVsPatching view: one point per (earlier head, later head) pair,
// the weight-based composition score of a kind (x) against the path-patching
// effect via that kind's input (y). Top right, weights and causal test agree.
// Hover a point for the pair and both numbers; a click selects the pair and
// its later head.
//
// Kernel → view: composition and patching (float32 [3, L, H, L, H]),
// baseline_value, metric, note, model_name. View → kernel: kind,
// selected_edge, selected_layer, selected_head. Drawn in SVG, every label as
// text, so the figure exports as it looks.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { layerPalette } from "../lib/colour";
import { axisTitles, kindMeasured, labelledPoints, paddedDomain, type PairPoint, pairName, pairPoints, pairText, pearson } from "../lib/compvspatching";
import { el, listen } from "../lib/dom";
import { noExport } from "../lib/export";
import { edgeOr, type Kind, KINDS } from "../lib/graph";
import { clearError, makePanel, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { drawAxes, fmt, linearScale, niceTicks, svgEl, svgTitle } from "../lib/svg";
import "../styles/causal.css";

export interface CompVsPatchingTraits {
  [key: string]: unknown;
  model_name: string;
  composition: WireArray;
  patching: WireArray;
  baseline_value: number;
  metric: string;
  note: string;
  kind: string;
  selected_edge: number[];
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<CompVsPatchingTraits>;

/** The plot's size (px) and margins: room for tick numbers and the axis titles. */
const PLOT = { width: 560, height: 380, left: 62, right: 18, top: 16, bottom: 48 };
/** Points labelled by name without hovering: the strongest effects (and the selected pair). */
const LABELLED = 3;

interface Data {
  L: number;
  H: number;
  composition: Float32Array;
  patching: Float32Array;
}

export function renderCompVsPatching({ model, el: root }: RenderProps<CompVsPatchingTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "compvspatching", "cw-compvspatching", () => String(m.get("kind") ?? ""));
  const cleanups: (() => void)[] = [];
  let data: Data | null = null;
  let points: PairPoint[] = [];
  let hovered: PairPoint | null = null;

  const kindControl = segmented(doc, "Kind:", KINDS.map((k) => ({ value: k, label: k })), (value) => {
    setTraits(m, { kind: value });
    frame.schedule();
  });
  panel.controls.append(kindControl.element);
  cleanups.push(kindControl.cleanup);
  const plot = el(doc, "div", "cw-plot");
  const summary = el(doc, "div", "cw-note");
  const note = el(doc, "div", "cw-note cw-caption");
  note.dataset.cwNote = "";
  panel.body.append(plot, summary, note);

  function load(): void {
    try {
      const comp = decodeArray(m.get("composition"));
      const path = decodeArray(m.get("patching"));
      const [k = 0, L = 0, H = 0, L2 = 0, H2 = 0] = comp.shape;
      const same = path.shape.length === comp.shape.length && path.shape.every((s, i) => s === comp.shape[i]);
      if (comp.shape.length !== 5 || k !== 3 || L !== L2 || H !== H2 || !same || !(comp.data instanceof Float32Array) || !(path.data instanceof Float32Array))
        throw new Error(`circuitwidgets: composition [${comp.shape.join(", ")}] and patching [${path.shape.join(", ")}] are not both float32 [3, L, H, L, H]`);
      data = { L, H, composition: comp.data, patching: path.data };
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  function kindNow(): Kind {
    const k = String(m.get("kind") ?? "K");
    return (KINDS as readonly string[]).includes(k) ? (k as Kind) : "K";
  }

  function selectedEdge(d: Data): [number, number, number, number] | null {
    return edgeOr(m.get("selected_edge"), d.L, d.H);
  }

  function draw(): void {
    setTitle(panel, "Composition beside path patching", String(m.get("model_name") ?? ""));
    note.textContent = String(m.get("note") ?? "");
    const d = data;
    if (d === null) return;
    const kind = kindNow();
    const k = KINDS.indexOf(kind);
    kindControl.update(kind);
    for (const b of kindControl.element.querySelectorAll<HTMLButtonElement>("button[data-value]")) {
      const measured = kindMeasured(d.patching, d.L, d.H, KINDS.indexOf(b.dataset.value as Kind));
      b.disabled = !measured;
      b.title = measured ? `${b.dataset.value}-composition against path patching via ${String(b.dataset.value).toLowerCase()}` : "path patching via this input was not run";
    }
    const baseline = Number(m.get("baseline_value")) || 0;
    const metric = String(m.get("metric") ?? "");
    points = pairPoints(d.composition, d.patching, d.L, d.H, k, baseline);
    const edge = selectedEdge(d);
    plot.replaceChildren(scatter(d, kind, baseline, metric, edge));
    const r = pearson(points);
    summary.textContent = points.length
      ? `${points.length} pairs of heads (earlier → later); Pearson r = ${Number.isFinite(r) ? fmt(r, 2) : "n/a"}. Top right: strong ${kind}-composition and a strong effect through the later head's ${kind === "Q" ? "queries" : kind === "K" ? "keys" : "values"}: weights and causal test agree.`
      : `No pair has both numbers for ${kind}: path patching via ${kind.toLowerCase()} was not run.`;
    summary.append(noExport(el(doc, "span", undefined, " Hover a point for its pair; click to select it.")));
    status(kind, baseline, edge);
  }

  function scatter(d: Data, kind: Kind, baseline: number, metric: string, edge: [number, number, number, number] | null): SVGSVGElement {
    const { width: W, height: H, left, right, top, bottom } = PLOT;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-compvspatching-svg", role: "img" });
    const titles = axisTitles(kind, metric, baseline);
    svgTitle(doc, svg, `${titles.x} against ${titles.y}`);
    const x = linearScale(paddedDomain(points.map((p) => p.x)), [left, W - right]);
    const y = linearScale(paddedDomain(points.map((p) => p.y)), [H - bottom, top]);
    const axes = svgEl(doc, "g", { class: "cw-axes" });
    // (six x ticks: composition scores span a tenth or two, which four ticks would leave at 0 and 0.1)
    drawAxes(doc, axes, x, y, { xLabel: titles.x, yLabel: titles.y, grid: true, xTicks: niceTicks(x.domain[0], x.domain[1], 6) });
    svg.append(axes);
    const colour = layerPalette(d.L);
    const layer = indexOr(m.get("selected_layer"), d.L, -1);
    const head = indexOr(m.get("selected_head"), d.H, -1);
    const isEdge = (p: PairPoint) => edge !== null && p.l1 === edge[0] && p.h1 === edge[1] && p.l2 === edge[2] && p.h2 === edge[3];
    // the selected later head's pairs last, so they are drawn over the others
    const ordered = [...points].sort((a, b) => Number(a.l2 === layer && a.h2 === head) - Number(b.l2 === layer && b.h2 === head) || Number(isEdge(a)) - Number(isEdge(b)));
    const dots = svgEl(doc, "g", { class: "cw-points" });
    for (const p of ordered) {
      const toSelected = p.l2 === layer && p.h2 === head;
      const g = svgEl(doc, "g", { class: "cw-pair", "data-cw-pair": `${p.l1}.${p.h1}-${p.l2}.${p.h2}` });
      g.append(svgEl(doc, "circle", { cx: x(p.x), cy: y(p.y), r: 9, fill: "transparent" }));
      g.append(svgEl(doc, "circle", { class: "cw-dot", cx: x(p.x), cy: y(p.y), r: isEdge(p) ? 5.5 : 4, fill: colour(p.l1), "fill-opacity": toSelected || isEdge(p) ? 0.95 : 0.55, stroke: isEdge(p) ? "#000" : toSelected ? "#222" : "#fff", "stroke-width": isEdge(p) ? 2 : 0.8 }));
      svgTitle(doc, g, pairText(p, kind, baseline));
      dots.append(g);
    }
    svg.append(dots);
    const labels = svgEl(doc, "g", { class: "cw-pair-labels", "pointer-events": "none" });
    for (const p of labelledPoints(points, LABELLED, edge)) {
      const px = x(p.x);
      const flip = px > W - right - 110; // (near the right edge the label goes left of its point)
      labels.append(svgEl(doc, "text", { x: flip ? px - 8 : px + 8, y: y(p.y) + 4, "text-anchor": flip ? "end" : "start", "font-size": 11, fill: "#222", "font-weight": isEdge(p) ? 700 : 400 }, pairName(p)));
    }
    svg.append(labels);
    return svg;
  }

  function status(kind: Kind, baseline: number, edge: [number, number, number, number] | null): void {
    if (hovered) {
      panel.status.textContent = pairText(hovered, kind, baseline);
      return;
    }
    const sel = edge ? points.find((p) => p.l1 === edge[0] && p.h1 === edge[1] && p.l2 === edge[2] && p.h2 === edge[3]) : undefined;
    panel.status.textContent = sel ? `${pairText(sel, kind, baseline)} (selected)` : edge ? `${pairName({ l1: edge[0], h1: edge[1], l2: edge[2], h2: edge[3] })} selected` : "Hover a point for its pair; click to select it";
  }

  const frame = perFrame(draw);
  const pairOf = (event: Event): PairPoint | null => {
    const g = (event.target as Element | null)?.closest?.("[data-cw-pair]");
    const id = g?.getAttribute("data-cw-pair");
    if (!id) return null;
    const [l1, h1, l2, h2] = id.split(/[.-]/).map(Number);
    return points.find((p) => p.l1 === l1 && p.h1 === h1 && p.l2 === l2 && p.h2 === h2) ?? null;
  };
  const restatus = () => {
    if (data) status(kindNow(), Number(m.get("baseline_value")) || 0, selectedEdge(data));
  };
  cleanups.push(
    listen(plot, "click", (event) => {
      const p = pairOf(event);
      if (p === null) return;
      setTraits(m, { selected_edge: [p.l1, p.h1, p.l2, p.h2], selected_layer: p.l2, selected_head: p.h2 });
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const p = pairOf(event);
      if (p === hovered) return;
      hovered = p;
      restatus();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      restatus();
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["composition", "patching"], redraw: ["baseline_value", "metric", "note", "kind", "selected_edge", "selected_layer", "selected_head", "model_name"] }, load, draw);
}
