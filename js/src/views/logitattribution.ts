// LogitAttribution view: a direct logit attribution as a running sum of bars
// (one row per part: embeddings, heads or attention, MLPs or neurons, biases),
// ending at the total, set against the model's logit. Hover gives a bar's
// value; a click on a head's bar selects it.
//
// Kernel → view: values [n_bars] (float64), labels, kinds, bar_layers,
// bar_heads, logit, metric, by, caption, model_name. View → kernel: order,
// selected_layer, selected_head.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { NEGATIVE, POSITIVE, signLegend } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { textWidth } from "../lib/headscores";
import { type Bar, orderBars, sumSentence, waterfall } from "../lib/lens";
import { clearError, makePanel, redrawOnResize, runView, segmented, setTitle, showError } from "../lib/panel";
import { perFrame, setTraits } from "../lib/selection";
import { fmt, niceTicks, svgEl, svgTitle, tickDigits } from "../lib/svg";
import "../styles/causal.css";

export interface LogitAttributionTraits {
  [key: string]: unknown;
  values: WireArray;
  labels: string[];
  kinds: string[];
  bar_layers: number[];
  bar_heads: number[];
  logit: number | null;
  metric: string;
  by: string;
  caption: string;
  model_name: string;
  order: string;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<LogitAttributionTraits>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const ints = (v: unknown): number[] => (Array.isArray(v) ? v.map((s) => (typeof s === "number" ? s : -1)) : []);
const REST = "#9a9a9a";

export function renderLogitAttribution({ model, el: root }: RenderProps<LogitAttributionTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let bars: Bar[] = [];
  const panel = makePanel(root, "logitattribution", "cw-logitattribution", () => String(m.get("by") ?? ""));
  const cleanups: (() => void)[] = [];
  const orderControl = segmented(doc, "Order:", [{ value: "model", label: "model" }, { value: "size", label: "by size" }], (value) => {
    setTraits(m, { order: value });
    frame.schedule();
  });
  panel.controls.append(orderControl.element);
  cleanups.push(orderControl.cleanup);
  const plot = el(doc, "div", "cw-plot");
  const note = el(doc, "div", "cw-note cw-caption");
  const signs = el(doc, "div", "cw-note cw-sign-legend");
  signs.textContent = `Bars: ${signLegend("raises the metric", "lowers it")}; grey: the rest and the biases.`;
  panel.body.append(plot, signs, note);
  let hovered = -1;

  function load(): void {
    try {
      const v = decodeArray(m.get("values"));
      const labels = strings(m.get("labels"));
      const kinds = strings(m.get("kinds"));
      const layers = ints(m.get("bar_layers"));
      const heads = ints(m.get("bar_heads"));
      bars = Array.from(v.data, (value, i) => ({ label: labels[i] ?? `part ${i}`, value, kind: kinds[i] ?? "other", layer: layers[i] ?? -1, head: heads[i] ?? -1 }));
      clearError(panel);
    } catch (err) {
      bars = [];
      showError(panel, err);
    }
  }

  const shown = () => orderBars(bars, String(m.get("order") ?? "model"));
  const logitOf = () => {
    const v = m.get("logit");
    return typeof v === "number" && Number.isFinite(v) ? v : null;
  };

  function describe(b: Bar, end: number): string {
    return `${b.label}: ${b.value >= 0 ? "+" : ""}${fmt(b.value, 3)} (running sum ${fmt(end, 3)})`;
  }

  function draw(): void {
    setTitle(panel, `Direct logit attribution${m.get("by") ? ` by ${String(m.get("by"))}` : ""}`, String(m.get("model_name") ?? ""));
    orderControl.update(String(m.get("order") ?? "model"));
    const list = shown();
    if (list.length === 0) {
      plot.replaceChildren();
      return;
    }
    const w = waterfall(list);
    const logit = logitOf();
    const lo = Math.min(w.lo, logit ?? 0);
    const hi = Math.max(w.hi, logit ?? 0);
    const pad = (hi - lo) * 0.04 || 1;
    const left = Math.min(170, Math.max(60, ...list.map((b) => textWidth(b.label)))) + 10;
    const width = Math.max(260, Math.min(640, (root.clientWidth || 700) - left - 70));
    const rowH = list.length > 40 ? 13 : 18;
    const top = 8;
    const x = (v: number) => left + ((v - (lo - pad)) / (hi - lo + 2 * pad)) * width;
    const H = top + (list.length + 1) * rowH + 40;
    const W = left + width + 70;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-logitattribution-svg", role: "img" });
    svgTitle(doc, svg, `Direct logit attribution: ${String(m.get("metric") ?? "")}`);
    const selL = m.get("selected_layer");
    const selH = m.get("selected_head");
    list.forEach((b, i) => {
      const y = top + i * rowH;
      const g = svgEl(doc, "g", { class: "cw-bar", "data-cw-bar": i, ...(b.head >= 0 ? { "data-cw-layer": b.layer, "data-cw-head": b.head } : {}) });
      const x0 = x(w.starts[i] as number);
      const x1 = x(w.ends[i] as number);
      const fill = b.kind === "other" || b.kind === "bias" ? REST : b.value >= 0 ? POSITIVE : NEGATIVE;
      g.append(svgEl(doc, "rect", { x: left, y, width, height: rowH, fill: i % 2 ? "#fafafa" : "#fff" }));
      g.append(svgEl(doc, "text", { x: left - 6, y: y + rowH / 2 + 4, "text-anchor": "end", "font-size": rowH > 14 ? 11 : 9.5, fill: "#333" }, b.label));
      g.append(svgEl(doc, "rect", { class: "cw-bar-fill", x: Math.min(x0, x1), y: y + 2, width: Math.max(1, Math.abs(x1 - x0)), height: rowH - 4, fill }));
      if (i > 0) g.append(svgEl(doc, "line", { x1: x0, x2: x0, y1: y - 2, y2: y + 2, stroke: "#aaa", "stroke-width": 0.8 }));
      g.append(svgEl(doc, "text", { x: Math.max(x0, x1) + 4, y: y + rowH / 2 + 3.5, "font-size": 9.5, fill: "#555", "font-variant-numeric": "tabular-nums" }, `${b.value >= 0 ? "+" : ""}${fmt(b.value, 2)}`));
      if (b.head >= 0 && b.layer === selL && b.head === selH) {
        g.append(svgEl(doc, "rect", { class: "cw-selected", x: left - 2, y: y + 0.5, width: width + 4, height: rowH - 1, fill: "none", stroke: "#111", "stroke-width": 1.5, "pointer-events": "none" }));
      }
      svgTitle(doc, g, describe(b, w.ends[i] as number));
      svg.append(g);
    });
    // the total, from 0, against the model's logit
    const yT = top + list.length * rowH;
    svg.append(svgEl(doc, "text", { x: left - 6, y: yT + rowH / 2 + 4, "text-anchor": "end", "font-size": 11, "font-weight": 600, fill: "#111" }, "sum"));
    svg.append(svgEl(doc, "rect", { class: "cw-total", x: Math.min(x(0), x(w.total)), y: yT + 2, width: Math.max(1, Math.abs(x(w.total) - x(0))), height: rowH - 4, fill: "#333" }));
    svg.append(svgEl(doc, "text", { x: Math.max(x(0), x(w.total)) + 4, y: yT + rowH / 2 + 3.5, "font-size": 10, "font-weight": 600, fill: "#111" }, fmt(w.total, 3)));
    const yAxis = yT + rowH + 6;
    svg.append(svgEl(doc, "line", { x1: x(0), x2: x(0), y1: top, y2: yAxis, stroke: "#666", "stroke-width": 0.8 }));
    if (logit !== null) {
      svg.append(svgEl(doc, "line", { class: "cw-logit", x1: x(logit), x2: x(logit), y1: top, y2: yAxis, stroke: "#e69f00", "stroke-width": 1.5, "stroke-dasharray": "4 3" }));
    }
    const ticks = niceTicks(lo - pad, hi + pad, 6);
    const digits = tickDigits(ticks);
    for (const t of ticks) {
      svg.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: yAxis, y2: yAxis + 4, stroke: "#666" }));
      svg.append(svgEl(doc, "text", { class: "cw-tick", x: x(t), y: yAxis + 15, "text-anchor": "middle", "font-size": 10, fill: "#444" }, fmt(t, digits)));
    }
    svg.append(svgEl(doc, "text", { x: left + width / 2, y: yAxis + 30, "text-anchor": "middle", "font-size": 10.5, fill: "#333" }, `${String(m.get("metric") ?? "logit")}${logit !== null ? ` · dashed: the model's logit ${fmt(logit, 3)}` : ""}`));
    plot.replaceChildren(svg);
    note.textContent = `${sumSentence(w.total, logit, String(m.get("metric") ?? "logit"))} ${String(m.get("caption") ?? "")}.`;
    status();
  }

  function status(): void {
    const list = shown();
    if (list.length === 0) return;
    const w = waterfall(list);
    if (hovered >= 0 && hovered < list.length) {
      panel.status.textContent = describe(list[hovered] as Bar, w.ends[hovered] as number);
      return;
    }
    const selL = m.get("selected_layer");
    const selH = m.get("selected_head");
    const i = list.findIndex((b) => b.head >= 0 && b.layer === selL && b.head === selH);
    panel.status.textContent = i >= 0 ? `${describe(list[i] as Bar, w.ends[i] as number)} selected; hover a bar for its value` : "Hover a bar for its value; click a head's bar to select it";
  }

  const frame = perFrame(draw);
  cleanups.push(redrawOnResize(root, frame)); // (its bars are sized to its width)
  const barOf = (event: Event): number => {
    const g = (event.target as Element | null)?.closest?.("[data-cw-bar]");
    return g ? Number(g.getAttribute("data-cw-bar")) : -1;
  };
  cleanups.push(
    listen(plot, "click", (event) => {
      const b = shown()[barOf(event)];
      if (b === undefined || b.head < 0) return;
      setTraits(m, { selected_layer: b.layer, selected_head: b.head });
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const i = barOf(event);
      if (i === hovered) return;
      hovered = i;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = -1;
      status();
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["values", "labels", "kinds", "bar_layers", "bar_heads"], redraw: ["logit", "metric", "by", "caption", "model_name", "order", "selected_layer", "selected_head"] }, load, draw);
}
