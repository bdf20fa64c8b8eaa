// EigenScatter view: every head at (OV copying score, QK copying score),
// coloured by layer; the selected head's eigenvalues in the complex plane and
// its detector scores.
//
// Kernel → view: scores [methods, 3 circuits, L, H], eigenvalues [3, L, H,
// d_head, 2], kcomp_source [L, H, 2], detectors [3, L, H], methods,
// method_notes. View → kernel: method, qk_circuit, selected_layer/head.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { noExport } from "../lib/export";
import { el, listen } from "../lib/dom";
import { offsetControl } from "../lib/offset";
import { clearError, makePanel, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { drawAxes, fmt, headName, layerColour, layerShape, linearScale, marker, svgEl, svgTitle } from "../lib/svg";
import {
  DETECTORS,
  detectorAt,
  type EigenData,
  eigenScore,
  headEigenvalues,
  METHOD_LABELS,
  type LabelWish,
  type Obstacle,
  placeLabels,
  scatterPoints,
  stripRows,
  scoreAt,
  scoreDomain,
  toEigenData,
} from "../lib/eigen";
import "../styles/eigen.css";

export interface EigenTraits {
  [key: string]: unknown;
  model_name: string;
  methods: string[];
  method_notes: string[];
  scores: WireArray;
  eigenvalues: WireArray;
  kcomp_source: WireArray;
  detectors: WireArray;
  method: string;
  qk_circuit: string;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<EigenTraits>;

/** Circuits in the order of the `scores` and `eigenvalues` axes. */
/** Colours of eigenvalues with positive and negative real part (RdBu ends). */
const POSITIVE = "#b2182b";
const NEGATIVE = "#2166ac";
const PLOT = { width: 380, height: 390, left: 54, right: 14, top: 26, bottom: 46, strip: 34 };
/** Extra height of each further row of the "n/a" strip, and the selection ring's radius. */
const STRIP_ROW = 11;
const RING = 11;

export function renderEigen({ model, el: root }: RenderProps<EigenTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "eigen", "cw-eigen", () => headLabel());
  const cleanups: (() => void)[] = [];
  let data: EigenData | null = null;

  const methodControl = segmented(doc, "Score:", [], () => undefined);
  let methodCleanup = methodControl.cleanup;
  let methodUpdate = methodControl.update;
  const methodSlot = el(doc, "span");
  const qkControl = segmented(
    doc,
    "QK axis:",
    [
      { value: "qk", label: "token ↔ token", title: "full QK circuit W_E W_QK W_Eᵀ: does a token attend to itself?" },
      { value: "qk_kcomp", label: "via K-composition", title: "QK term through the earlier head with the strongest K-composition (induction heads)" },
    ],
    (value) => {
      setTraits(m, { qk_circuit: value });
      frame.schedule();
    },
  );
  panel.controls.append(methodSlot, qkControl.element);
  cleanups.push(offsetControl(doc, m as unknown as AnyModel<Record<string, unknown>>, panel.controls));
  cleanups.push(qkControl.cleanup, () => methodCleanup());

  const plotBox = el(doc, "div", "cw-plot");
  const side = el(doc, "div", "cw-side");
  panel.body.append(plotBox, side);
  const note = el(doc, "div", "cw-note cw-method-note");
  const hint = noExport(el(doc, "span", undefined, " Click a head to select it; hover a dot for its name."));
  const legend = el(doc, "div", "cw-legend");
  plotBox.append(legend);
  panel.body.after(note);

  function methods(): string[] {
    const ms = m.get("methods");
    return Array.isArray(ms) ? ms.map(String) : [];
  }

  function methodIndex(): number {
    const i = methods().indexOf(String(m.get("method")));
    return i < 0 ? 0 : i;
  }

  function selection(d: EigenData): { layer: number; head: number } {
    return { layer: indexOr(m.get("selected_layer"), d.nLayers, 0), head: indexOr(m.get("selected_head"), d.nHeads, 0) };
  }

  function headLabel(): string {
    if (data === null) return "";
    const s = selection(data);
    return headName(s.layer, s.head);
  }

  function buildMethodControl(): void {
    methodCleanup();
    const c = segmented(
      doc,
      "Score:",
      methods().map((v) => ({ value: v, label: METHOD_LABELS[v] ?? v })),
      (value) => {
        setTraits(m, { method: value });
        frame.schedule();
      },
    );
    methodCleanup = c.cleanup;
    methodUpdate = c.update;
    methodSlot.replaceChildren(c.element);
  }

  function load(): void {
    try {
      data = toEigenData(
        decodeArray(m.get("scores")),
        decodeArray(m.get("eigenvalues")),
        decodeArray(m.get("kcomp_source")),
        decodeArray(m.get("detectors")),
      );
    } catch (err) {
      data = null;
      plotBox.replaceChildren();
      showError(panel, err);
      return;
    }
    clearError(panel);
    buildMethodControl();
    legend.replaceChildren();
    for (let l = 0; l < data.nLayers; l++) {
      const item = el(doc, "span");
      const sw = el(doc, "span", "cw-swatch");
      sw.style.background = layerColour(l);
      if (layerShape(l) !== "circle") sw.style.borderRadius = "0";
      item.append(sw, doc.createTextNode(`layer ${l}`));
      legend.append(item);
    }
  }

  function drawScatter(d: EigenData, sel: { layer: number; head: number }): SVGSVGElement {
    const method = methods()[methodIndex()] ?? "eigen";
    const qk = String(m.get("qk_circuit")) === "qk" ? "qk" : "qk_kcomp";
    const points = scatterPoints(d, methodIndex(), qk);
    const hasStrip = points.some((p) => Number.isNaN(p.y));
    const W = PLOT.width;
    const H = PLOT.height + (hasStrip ? PLOT.strip : 0);
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "OV and QK copying scores of every head" });
    const [lo, hi] = scoreDomain(method);
    const pad = (hi - lo) * 0.04;
    const x = linearScale([lo - pad, hi + pad], [PLOT.left, W - PLOT.right]);
    const y = linearScale([lo - pad, hi + pad], [PLOT.height - PLOT.bottom, PLOT.top]);
    const axes = svgEl(doc, "g");
    drawAxes(doc, axes, x, y, {
      xLabel: "OV copying score",
      yLabel: qk === "qk" ? "QK matching score (token ↔ token)" : "QK matching score (via K-composition)",
      xTicks: method === "eigen" ? [-1, -0.5, 0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1],
      yTicks: method === "eigen" ? [-1, -0.5, 0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1],
      grid: true,
    });
    svg.append(axes);
    if (method === "eigen") {
      svg.append(svgEl(doc, "text", { x: x(1), y: 12, "text-anchor": "end", "font-size": 10.5, fill: "#777", "font-style": "italic" }, "copying & matching ↗"));
    }
    const stripY = PLOT.height + 8;
    // heads with no vertical value sit on a strip below, dodged into rows so none hides another
    const stripPoints = points.filter((p) => Number.isNaN(p.y) && Number.isFinite(p.x));
    const rowsOf = stripRows(stripPoints.map((p) => x(p.x)), 13);
    const stripRow = new Map(stripPoints.map((p, i) => [`${p.layer}.${p.head}`, rowsOf[i] as number]));
    const stripRowCount = Math.max(0, ...rowsOf.map((r) => r + 1));
    if (hasStrip) {
      const extra = Math.max(0, stripRowCount - 1) * STRIP_ROW;
      svg.setAttribute("height", String(H + extra));
      svg.setAttribute("viewBox", `0 0 ${W} ${H + extra}`);
      svg.append(svgEl(doc, "line", { x1: PLOT.left, x2: W - PLOT.right, y1: stripY, y2: stripY, stroke: "#ddd", "stroke-dasharray": "3 3" }));
      svg.append(svgEl(doc, "text", { x: PLOT.left - 6, y: stripY + 4, "text-anchor": "end", "font-size": 10.5, fill: "#777" }, "n/a"));
      svg.append(svgEl(doc, "text", { x: W - PLOT.right, y: stripY + extra + 20, "text-anchor": "end", "font-size": 10, fill: "#888" }, "layer 0: no earlier head to compose with"));
    }
    const labelAll = points.length <= 48;
    const labels = svgEl(doc, "g", { class: "cw-labels" });
    const wishes: (LabelWish & { text: string; selected: boolean })[] = [];
    const obstacles: Obstacle[] = [];
    const ordered = [...points].sort((a, b) => Number(a.layer === sel.layer && a.head === sel.head) - Number(b.layer === sel.layer && b.head === sel.head));
    for (const p of ordered) {
      if (!Number.isFinite(p.x)) continue;
      const selected = p.layer === sel.layer && p.head === sel.head;
      const px = x(p.x);
      const py = Number.isNaN(p.y) ? stripY + (stripRow.get(`${p.layer}.${p.head}`) ?? 0) * STRIP_ROW : y(p.y);
      const name = headName(p.layer, p.head);
      const g = svgEl(doc, "g", { class: "cw-point", "data-cw-head": `${p.layer}.${p.head}`, "data-cw-x": px.toFixed(1), "data-cw-y": py.toFixed(1), tabindex: 0, "aria-label": name });
      if (selected) g.append(svgEl(doc, "circle", { class: "cw-ring", cx: px, cy: py, r: RING, fill: "none", stroke: "#222", "stroke-width": 2 }));
      const r = selected ? 7 : 5.5;
      const mark = marker(doc, layerShape(p.layer), px, py, r, {
        class: "cw-mark",
        fill: layerColour(p.layer),
        stroke: "#fff",
        "stroke-width": 1.2,
        "fill-opacity": Number.isNaN(p.y) ? 0.55 : 0.95,
      });
      g.append(mark);
      svgTitle(doc, g, `${name}: OV ${fmt(p.x)}, QK ${Number.isNaN(p.y) ? "n/a" : fmt(p.y)}`);
      svg.append(g);
      obstacles.push({ x: px, y: py, r: selected ? RING + 2 : r + 1.5 });
      if (labelAll || selected) {
        // boxes a little larger than the glyphs (ascent + descent), so a drawn label stays inside its box
        wishes.push({ x: px, y: py, width: name.length * (selected ? 8.2 : 6.6), height: selected ? 15 : 12.5, clear: selected ? RING + 3 : 8, required: selected, text: name, selected });
      }
    }
    // the selected head's label first (it wins its spot), then the others; a label that
    // finds no spot clear of every dot, ring and label is left to the hover label
    wishes.sort((a, b) => Number(b.selected) - Number(a.selected));
    const plotBounds = { x: 0, y: 0, width: W, height: Number(svg.getAttribute("height")) };
    placeLabels(wishes, obstacles, plotBounds).forEach((box, i) => {
      const w = wishes[i] as (typeof wishes)[number];
      if (box === null) return;
      labels.append(
        svgEl(
          doc,
          "text",
          {
            class: "cw-label",
            "data-cw-label": w.text,
            x: box.x,
            y: box.y + (w.selected ? 11.8 : 9.8),
            "font-size": w.selected ? 12 : 10,
            "font-weight": w.selected ? 600 : 400,
            fill: w.selected ? "#111" : "#555",
            "pointer-events": "none",
          },
          w.text,
        ),
      );
    });
    svg.append(labels);
    // the hovered head's name, drawn on top (every head is reachable this way)
    const hoverLabel = svgEl(doc, "g", { class: "cw-hover-label", "pointer-events": "none", visibility: "hidden" });
    hoverLabel.append(
      svgEl(doc, "rect", { rx: 2, fill: "#fff", "fill-opacity": 0.92, stroke: "#999", "stroke-width": 0.6 }),
      svgEl(doc, "text", { "font-size": 11, fill: "#111" }),
    );
    svg.append(hoverLabel);
    return svg;
  }

  function drawComplex(d: EigenData, c: number, sel: { layer: number; head: number }, title: string): HTMLDivElement {
    const box = el(doc, "div", "cw-complex");
    const eigs = headEigenvalues(d, c, sel.layer, sel.head);
    const size = 124;
    const top = 18; // the plot's title
    const svg = svgEl(doc, "svg", { width: size + 8, height: size + 8 + top, viewBox: `-4 ${-4 - top} ${size + 8} ${size + 8 + top}`, role: "img", "aria-label": `${title}: eigenvalues in the complex plane` });
    svg.append(svgEl(doc, "text", { class: "cw-complex-title", x: 0, y: -6, "font-size": 11.5, "font-weight": 600, fill: "#222" }, `${title} eigenvalues λ`));
    const r = Math.max(1e-12, ...eigs.map(([re, im]) => Math.hypot(re, im)));
    const s = linearScale([-r * 1.08, r * 1.08], [0, size]);
    const sy = linearScale([-r * 1.08, r * 1.08], [size, 0]);
    svg.append(svgEl(doc, "rect", { x: 0, y: 0, width: size, height: size, fill: "#fafafa", stroke: "#ddd" }));
    svg.append(svgEl(doc, "line", { x1: s(0), x2: s(0), y1: 0, y2: size, stroke: "#ccc" }));
    svg.append(svgEl(doc, "line", { x1: 0, x2: size, y1: sy(0), y2: sy(0), stroke: "#ccc" }));
    svg.append(svgEl(doc, "circle", { cx: s(0), cy: sy(0), r: s(r) - s(0), fill: "none", stroke: "#e5e5e5", "stroke-dasharray": "2 2" }));
    for (const [re, im] of eigs) {
      const colour = re >= 0 ? POSITIVE : NEGATIVE;
      const dot = svgEl(doc, "circle", { cx: s(re), cy: sy(im), r: 3, fill: colour, "fill-opacity": 0.75 });
      svgTitle(doc, dot, `λ = ${fmt(re, 3)}${im >= 0 ? " + " : " − "}${fmt(Math.abs(im), 3)}i`);
      svg.append(dot);
    }
    svg.append(svgEl(doc, "text", { x: size - 3, y: sy(0) - 3, "text-anchor": "end", "font-size": 9, fill: "#888" }, "Re"));
    svg.append(svgEl(doc, "text", { x: s(0) + 3, y: 9, "font-size": 9, fill: "#888" }, "Im"));
    const caption = el(doc, "div", "cw-note");
    caption.textContent = eigs.length ? `${title}: Σλ/Σ|λ| = ${fmt(eigenScore(eigs))}, |λ| ≤ ${r.toPrecision(3)}` : `${title}: none (no earlier head)`;
    box.append(svg, caption);
    return box;
  }

  function drawDetectors(d: EigenData, sel: { layer: number; head: number }): SVGSVGElement {
    const W = 250;
    const row = 20;
    const svg = svgEl(doc, "svg", { width: W, height: row * DETECTORS.length + 6 });
    const x = linearScale([0, 1], [104, W - 44]);
    DETECTORS.forEach((det, k) => {
      const v = detectorAt(d, k, sel.layer, sel.head);
      const y0 = 3 + k * row;
      svg.append(svgEl(doc, "text", { x: 0, y: y0 + 13, "font-size": 11.5, fill: "#333" }, det.label));
      svg.append(svgEl(doc, "rect", { x: x(0), y: y0 + 3, width: x(1) - x(0), height: 12, fill: "#eee" }));
      svg.append(svgEl(doc, "rect", { x: x(0), y: y0 + 3, width: Math.max(0, x(Math.min(1, Math.max(0, v))) - x(0)), height: 12, fill: "#0072B2" }));
      svg.append(svgEl(doc, "text", { x: W - 2, y: y0 + 13, "text-anchor": "end", "font-size": 11.5, fill: "#222", "font-variant-numeric": "tabular-nums" }, fmt(v)));
    });
    return svg;
  }

  function draw(): void {
    const d = data;
    if (d === null) return;
    const sel = selection(d);
    const method = methods()[methodIndex()] ?? "eigen";
    methodUpdate(method);
    qkControl.update(String(m.get("qk_circuit")) === "qk" ? "qk" : "qk_kcomp");
    setTitle(panel, "Copying and matching of every head", String(m.get("model_name") ?? ""));
    const scatter = drawScatter(d, sel);
    const old = plotBox.querySelector("svg");
    if (old) old.replaceWith(scatter);
    else plotBox.prepend(scatter);

    const heading = el(doc, "div", "cw-side-title", `${headName(sel.layer, sel.head)}: eigenvalues`);
    const pair = el(doc, "div");
    pair.style.display = "flex";
    pair.style.gap = "10px";
    const qkIndex = String(m.get("qk_circuit")) === "qk" ? 1 : 2;
    let qkTitle = "QK";
    if (qkIndex === 2) {
      const src = [d.kcompSource.data[(sel.layer * d.nHeads + sel.head) * 2] as number, d.kcompSource.data[(sel.layer * d.nHeads + sel.head) * 2 + 1] as number];
      qkTitle = src[0] !== undefined && src[0] >= 0 ? `QK via ${headName(src[0], src[1] as number)}` : "QK via K-comp.";
    }
    pair.append(drawComplex(d, 0, sel, "OV"), drawComplex(d, qkIndex, sel, qkTitle));
    const key = svgEl(doc, "svg", { class: "cw-eig-key", width: 270, height: 16, viewBox: "0 0 270 16", role: "img", "aria-label": "colour key of the eigenvalue plots" });
    key.append(
      svgEl(doc, "circle", { cx: 5, cy: 8, r: 3.5, fill: POSITIVE, "fill-opacity": 0.75 }),
      svgEl(doc, "text", { x: 13, y: 12, "font-size": 11, fill: "#333" }, "Re λ ≥ 0 (copying)"),
      svgEl(doc, "circle", { cx: 131, cy: 8, r: 3.5, fill: NEGATIVE, "fill-opacity": 0.75 }),
      svgEl(doc, "text", { x: 139, y: 12, "font-size": 11, fill: "#333" }, "Re λ < 0 (anti-copying)"),
    );
    const detTitle = el(doc, "div", "cw-side-title", "Detector scores (attention on repeated random tokens)");
    detTitle.style.marginTop = "8px";
    detTitle.style.fontWeight = "400";
    detTitle.style.fontSize = "12px";
    side.replaceChildren(heading, pair, key, detTitle, drawDetectors(d, sel));

    const notes = m.get("method_notes");
    note.textContent = `${METHOD_LABELS[method] ?? method}: ${Array.isArray(notes) ? String(notes[methodIndex()] ?? "") : ""}.`;
    note.append(hint);
    panel.status.textContent = `${headName(sel.layer, sel.head)} selected (OV ${fmt(scoreAt(d, methodIndex(), 0, sel.layer, sel.head))}, QK ${fmt(scoreAt(d, methodIndex(), qkIndex, sel.layer, sel.head))})`;
  }

  const frame = perFrame(draw);

  function showHoverLabel(event: Event): void {
    const g = (event.target as Element | null)?.closest?.("[data-cw-head]");
    const svg = plotBox.querySelector("svg");
    const label = svg?.querySelector<SVGGElement>(".cw-hover-label");
    if (!label) return;
    if (!g) {
      label.setAttribute("visibility", "hidden");
      return;
    }
    const [layer, head] = (g.getAttribute("data-cw-head") ?? "").split(".").map(Number);
    const px = Number(g.getAttribute("data-cw-x"));
    const py = Number(g.getAttribute("data-cw-y"));
    const name = headName(layer as number, head as number);
    const text = label.querySelector("text") as SVGTextElement;
    const rect = label.querySelector("rect") as SVGRectElement;
    const width = name.length * 7 + 8;
    const width0 = Number(svg?.getAttribute("width")) || PLOT.width;
    const left = px + 10 + width > width0 ? px - 10 - width : px + 10;
    text.textContent = name;
    text.setAttribute("x", String(left + 4));
    text.setAttribute("y", String(py - 10));
    for (const [k, v] of Object.entries({ x: left, y: py - 22, width, height: 16 })) rect.setAttribute(k, String(v));
    label.setAttribute("visibility", "visible");
  }

  cleanups.push(
    listen(plotBox, "mouseover", showHoverLabel),
    listen(plotBox, "focusin", showHoverLabel),
    listen(plotBox, "mouseleave", showHoverLabel),
    listen(plotBox, "click", (event) => {
      const g = (event.target as Element | null)?.closest?.("[data-cw-head]");
      const value = g?.getAttribute("data-cw-head");
      if (!value) return;
      const [layer, head] = value.split(".").map(Number);
      setTraits(m, { selected_layer: layer as number, selected_head: head as number });
      frame.schedule();
    }),
    listen(plotBox, "keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      const g = (event.target as Element | null)?.closest?.("[data-cw-head]");
      if (g) {
        event.preventDefault();
        (g as unknown as { dispatchEvent(e: Event): boolean }).dispatchEvent(new MouseEvent("click", { bubbles: true }));
      }
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["scores", "eigenvalues", "kcomp_source", "detectors", "methods"], redraw: ["method", "qk_circuit", "selected_layer", "selected_head", "method_notes", "model_name"] }, load, draw);
}
