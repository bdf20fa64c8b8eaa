// NeuronSparsity view: per-neuron firing-rate histograms of twin models (SoLU against GELU), one row per model.
//
// Kernel → view: model_names, site, rates [n_models, n_units] (each neuron's share of tokens it fires on), level,
// n_tokens_read. View ↔ kernel: selected_feature (the neuron marked in every histogram; a click on a bar selects the
// next neuron of that bin). The view bins the rates itself, so it needs no kernel in an exported page.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { el, listen } from "../lib/dom";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { drawAxes, fmt, linearScale, svgEl, svgTitle } from "../lib/svg";
import "../styles/neuronsparsity.css";

export interface NeuronSparsityTraits {
  [key: string]: unknown;
  model_names: string[];
  site: string;
  rates: WireArray;
  level: number;
  n_tokens_read: number;
  selected_feature: number;
}

const CHART = { width: 420, height: 170, left: 56, right: 12, top: 10, bottom: 42 };
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7"];

/** Histogram bins over log10(rate): `edges` (log10, ascending) and, per bin, the neurons in it (ascending index).
 *  A rate of 0 (a neuron that never fires) goes in the first bin. */
export function binRates(rates: ArrayLike<number>, edges: readonly number[]): number[][] {
  const bins: number[][] = Array.from({ length: Math.max(0, edges.length - 1) }, () => []);
  if (bins.length === 0) return bins;
  for (let i = 0; i < rates.length; i++) {
    const v = Number(rates[i]);
    if (!Number.isFinite(v)) continue;
    const x = v > 0 ? Math.log10(v) : (edges[0] ?? 0);
    let b = 0;
    while (b < bins.length - 1 && x >= (edges[b + 1] ?? Infinity)) b++;
    bins[b]?.push(i);
  }
  return bins;
}

/** Log-spaced edges (log10) from the smallest positive rate of all models (at least 1e-4) to 1. */
export function rateEdges(rates: ArrayLike<number>, nBins = 24): number[] {
  let low = 1;
  for (let i = 0; i < rates.length; i++) {
    const v = Number(rates[i]);
    if (v > 0 && v < low) low = v;
  }
  const start = Math.floor(Math.log10(Math.max(low, 1e-4)) * 2) / 2; // (a half-decade boundary)
  return Array.from({ length: nBins + 1 }, (_, i) => start + ((0 - start) * i) / nBins);
}

/** The neuron a click on a bin selects: the next one in the bin after the current selection, wrapping. */
export function nextInBin(bin: readonly number[], current: number): number {
  if (bin.length === 0) return current;
  return bin.find((u) => u > current) ?? bin[0] ?? current;
}

/** A rate as a percentage with enough digits to tell small ones apart. */
export function rateText(v: number): string {
  if (!Number.isFinite(v)) return "–";
  const pct = 100 * v;
  return `${pct >= 10 ? pct.toFixed(1) : pct >= 0.1 ? pct.toFixed(2) : pct.toFixed(3)} %`;
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? Number.NaN : n % 2 ? (s[(n - 1) / 2] ?? 0) : ((s[n / 2 - 1] ?? 0) + (s[n / 2] ?? 0)) / 2;
}

export function renderNeuronSparsity({ model, el: root }: RenderProps<NeuronSparsityTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as AnyModel<NeuronSparsityTraits>;
  const panel = makePanel(root, "neuronsparsity", "cw-neuronsparsity");
  const cleanups: (() => void)[] = [];
  let rows: number[][] = [];
  let edges: number[] = [];

  function load(): void {
    try {
      const r = decodeArray(m.get("rates"));
      const [nModels = 0, nUnits = 0] = r.shape;
      rows = Array.from({ length: nModels }, (_, i) => Array.from(r.data.slice(i * nUnits, (i + 1) * nUnits), Number));
      edges = rateEdges(r.data);
      clearError(panel);
    } catch (err) {
      rows = [];
      showError(panel, err);
    }
  }

  function chart(row: number, name: string, rates: number[], colour: string, selected: number): HTMLDivElement {
    const box = el(doc, "div", "cw-sparsity-chart");
    box.append(el(doc, "div", "cw-chart-title", `${name}: median firing rate ${rateText(median(rates))}`));
    const bins = binRates(rates, edges);
    const { width: W, height: H, left, right, top, bottom } = CHART;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const x = linearScale([edges[0] ?? -4, 0], [left, W - right]);
    const y = linearScale([0, Math.max(1, ...bins.map((b) => b.length))], [H - bottom, top]);
    const g = svgEl(doc, "g");
    drawAxes(doc, g, x, y, { xLabel: "log10 share of tokens the neuron fires on", yLabel: "neurons" });
    bins.forEach((bin, b) => {
      const a = edges[b] ?? 0;
      const z = edges[b + 1] ?? 0;
      const bar = svgEl(doc, "rect", { class: "cw-bar", x: x(a) + 0.5, y: y(bin.length), width: Math.max(1, x(z) - x(a) - 1), height: Math.max(0, y(0) - y(bin.length)), fill: colour });
      bar.dataset.bin = String(b);
      bar.dataset.row = String(row);
      svgTitle(doc, bar, `${bin.length} neurons fire on ${rateText(10 ** a)}–${rateText(10 ** z)} of tokens (click: select one)`);
      g.append(bar);
    });
    if (selected < 0) {
      svg.append(g);
      box.append(svg);
      return box;
    }
    const v = rates[selected] ?? 0;
    const at = x(v > 0 ? Math.max(Math.log10(v), edges[0] ?? -4) : (edges[0] ?? -4));
    g.append(svgEl(doc, "line", { class: "cw-marker", x1: at, x2: at, y1: top, y2: H - bottom, stroke: "#222", "stroke-width": 2 }));
    svg.append(g);
    box.append(svg);
    return box;
  }

  function draw(): void {
    const names = (m.get("model_names") ?? []) as string[];
    setTitle(panel, "Neuron sparsity", `${String(m.get("site") ?? "")}, on ${Number(m.get("n_tokens_read") ?? 0).toLocaleString("en")} tokens`);
    const nUnits = rows[0]?.length ?? 0;
    if (rows.length === 0 || nUnits === 0) {
      panel.body.replaceChildren(el(doc, "div", "cw-note", "No neurons measured."));
      panel.status.textContent = "No data";
      return;
    }
    const u = indexOr(m.get("selected_feature"), nUnits, 0, true);
    panel.body.replaceChildren(
      ...rows.map((r, i) => chart(i, names[i] ?? `model ${i}`, r, COLOURS[i % COLOURS.length] ?? "#888", u)),
      el(doc, "div", "cw-note", `A neuron fires where it is above its median by more than ${fmt(100 * Number(m.get("level") ?? 0.2), 0)} % of its range (median to max). The line marks the selected neuron.`),
    );
    panel.status.textContent = u < 0 ? "No neuron selected: click a bar to select one of its neurons" : `neuron ${u}: fires on ` + rows.map((r, i) => `${rateText(r[u] ?? Number.NaN)} of tokens in ${names[i] ?? `model ${i}`}`).join(", ");
  }

  const frame = perFrame(draw);
  // one listener for every bar (the bars are redrawn with each selection)
  cleanups.push(
    listen(panel.body, "click", (event) => {
      const bar = (event.target as Element | null)?.closest?.("rect.cw-bar") as SVGRectElement | null;
      const rates = rows[Number(bar?.dataset.row)];
      if (bar === null || rates === undefined) return;
      const bin = binRates(rates, edges)[Number(bar.dataset.bin)] ?? [];
      setTraits(m, { selected_feature: nextInBin(bin, indexOr(m.get("selected_feature"), rates.length, -1, true)) });
      frame.schedule();
    }),
  );
  return runView(m, panel, frame, cleanups, { data: ["rates"], redraw: ["model_names", "site", "level", "n_tokens_read", "selected_feature"] }, load, draw);
}
