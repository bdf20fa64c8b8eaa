// TermImportance view: the loss reduction each path order adds (the paper's
// term-importance algorithm) and each layer's share of order 1, with numbers.
//
// Kernel → view: marginal [orders], losses [orders], layer_order1 [L],
// loss_no_terms, full_loss, n_sequences, n_positions. View → kernel:
// selected_order, selected_layer (both optional, -1 for none).

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { el, listen } from "../lib/dom";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, NONE, perFrame, setTraits } from "../lib/selection";
import { fmt, layerColour, linearScale, niceTicks, svgEl, svgTitle, tickDigits } from "../lib/svg";
import "../styles/termimportance.css";

export interface TermTraits {
  [key: string]: unknown;
  model_name: string;
  losses: WireArray;
  marginal: WireArray;
  layer_order1: WireArray;
  loss_no_terms: number;
  full_loss: number;
  n_sequences: number;
  n_positions: number;
  selected_order: number;
  selected_layer: number;
}

type Model = AnyModel<TermTraits>;

/** The paper's name of the order-n terms. */
export function orderLabel(n: number): string {
  if (n === 0) return "order 0 · direct path";
  if (n === 1) return "order 1 · single heads";
  if (n === 2) return "order 2 · virtual heads";
  return `order ${n}`;
}

/** A value domain covering 0 and every value, padded a little on the far side. */
export function barDomain(values: readonly number[]): [number, number] {
  const finite = values.filter(Number.isFinite);
  const lo = Math.min(0, ...finite);
  const hi = Math.max(0, ...finite);
  if (lo === hi) return [0, 1];
  return [lo, hi];
}

interface Bar {
  label: string;
  value: number;
  colour: string;
  attrs: Record<string, string>;
  title: string;
}


export function renderTermImportance({ model, el: root }: RenderProps<TermTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "termimportance", "cw-terms");
  const cleanups: (() => void)[] = [];
  let marginal: number[] = [];
  let losses: number[] = [];
  let layers: number[] = [];
  const summary = el(doc, "div", "cw-note");
  const ordersBox = el(doc, "div");
  const layersBox = el(doc, "div");
  panel.body.append(ordersBox, layersBox);
  panel.body.after(summary);

  function load(): void {
    try {
      marginal = Array.from(decodeArray(m.get("marginal")).data);
      losses = Array.from(decodeArray(m.get("losses")).data);
      layers = Array.from(decodeArray(m.get("layer_order1")).data);
      clearError(panel);
    } catch (err) {
      marginal = [];
      losses = [];
      layers = [];
      showError(panel, err);
    }
  }

  function chart(title: string, bars: Bar[], selected: number, labelWidth: number): HTMLDivElement {
    const box = el(doc, "div");
    box.append(el(doc, "div", "cw-chart-title", title));
    const row = 24;
    const W = labelWidth + 260;
    const H = bars.length * row + 26;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const [lo, hi] = barDomain(bars.map((b) => b.value));
    const x = linearScale([lo, hi], [labelWidth + 10, W - 64]);
    const ticks = niceTicks(lo, hi, 4);
    for (const t of ticks) {
      svg.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: 2, y2: H - 20, stroke: t === 0 ? "#888" : "#eee" }));
      svg.append(svgEl(doc, "text", { x: x(t), y: H - 6, "text-anchor": "middle", "font-size": 10, fill: "#666" }, fmt(t, tickDigits(ticks))));
    }
    bars.forEach((b, i) => {
      const y = 4 + i * row;
      const g = svgEl(doc, "g", { class: "cw-bar", ...b.attrs });
      const x0 = x(Math.min(0, b.value));
      const x1 = x(Math.max(0, b.value));
      if (i === selected) g.append(svgEl(doc, "rect", { x: 0, y: y - 2, width: W, height: row - 2, fill: "#fff1d6" }));
      g.append(svgEl(doc, "text", { x: labelWidth, y: y + 13, "text-anchor": "end", "font-size": 11.5, fill: "#222", "font-weight": i === selected ? 600 : 400 }, b.label));
      g.append(svgEl(doc, "rect", { class: "cw-fill", x: x0, y: y + 2, width: Math.max(1, x1 - x0), height: row - 10, fill: b.colour, "fill-opacity": 0.85 }));
      g.append(svgEl(doc, "text", { x: W - 2, y: y + 13, "text-anchor": "end", "font-size": 11.5, fill: "#111", "font-variant-numeric": "tabular-nums" }, fmt(b.value, 3)));
      svgTitle(doc, g, b.title);
      svg.append(g);
    });
    box.append(svg);
    return box;
  }

  function draw(): void {
    const order = indexOr(m.get("selected_order"), marginal.length, NONE, true);
    const layer = indexOr(m.get("selected_layer"), layers.length, NONE, true);
    setTitle(panel, "Term importance", String(m.get("model_name") ?? ""));
    const orderBars: Bar[] = marginal.map((v, n) => ({
      label: orderLabel(n),
      value: v,
      colour: n === 0 ? "#999999" : n === 1 ? "#0072B2" : n === 2 ? "#E69F00" : "#CC79A7",
      attrs: { "data-cw-order": String(n) },
      title: `${orderLabel(n)}: adding these terms lowers the loss by ${fmt(v, 4)} nats (loss with terms ≤ ${n}: ${fmt(losses[n] ?? Number.NaN, 4)})`,
    }));
    const layerBars: Bar[] = layers.map((v, l) => ({
      label: `layer ${l}`,
      value: v,
      colour: layerColour(l),
      attrs: { "data-cw-layer": String(l) },
      title: `layer ${l}'s heads alone, added to the direct path, lower the loss by ${fmt(v, 4)} nats`,
    }));
    ordersBox.replaceChildren(chart("Loss reduction by path order (nats)", orderBars, order, 150));
    layersBox.replaceChildren(chart("Order 1 by layer (nats)", layerBars, layer, 60));
    const n = Number(m.get("n_sequences")) || 0;
    const p = Number(m.get("n_positions")) || 0;
    summary.textContent =
      `Loss with no terms ${fmt(Number(m.get("loss_no_terms")), 3)}, direct path only ${fmt(losses[0] ?? Number.NaN, 3)}, ` +
      `full model ${fmt(Number(m.get("full_loss")), 3)} nats; attention patterns frozen; ${n} × ${p} tokens. ` +
      "Each layer's bar adds that layer's heads alone to the direct path, so the layer bars need not sum to the order-1 total.";
    if (order !== NONE) panel.status.textContent = `${orderLabel(order)} selected: −${fmt(marginal[order] ?? Number.NaN, 3)} nats`;
    else if (layer !== NONE) panel.status.textContent = `Layer ${layer} selected: its order-1 terms lower the loss by ${fmt(layers[layer] ?? Number.NaN, 3)} nats`;
    else panel.status.textContent = "Nothing selected";
  }

  const frame = perFrame(draw);

  cleanups.push(
    listen(panel.body, "click", (event) => {
      const target = event.target as Element | null;
      const o = target?.closest?.("[data-cw-order]");
      if (o) {
        const i = Number(o.getAttribute("data-cw-order"));
        setTraits(m, { selected_order: m.get("selected_order") === i ? NONE : i });
        frame.schedule();
        return;
      }
      const l = target?.closest?.("[data-cw-layer]");
      if (l) {
        setTraits(m, { selected_layer: Number(l.getAttribute("data-cw-layer")) });
        frame.schedule();
      }
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["marginal", "losses", "layer_order1"], redraw: ["selected_order", "selected_layer", "loss_no_terms", "full_loss", "n_sequences", "n_positions", "model_name"] }, load, draw);
}
