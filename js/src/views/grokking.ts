// GrokkingScrubber view: scrub through a grokking run.
//
// Kernel → view: steps [T], train_loss, test_loss [T]; checkpoint_steps [C]; restricted_loss, excluded_loss [C];
// fourier_norms [C, F]; neuron_frequency [C, M, F]; key_frequencies; phases [memorised, cleanup, grokked].
// View ↔ kernel: selected_checkpoint (the slider; every array is here, so scrubbing needs no kernel).

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { el, listen } from "../lib/dom";
import { polylineRuns } from "../lib/history";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { drawAxes, fmt, linearScale, svgEl, svgTitle } from "../lib/svg";
import "../styles/grokking.css";

export interface GrokkingTraits {
  [key: string]: unknown;
  title: string;
  steps: WireArray;
  train_loss: WireArray;
  test_loss: WireArray;
  checkpoint_steps: WireArray;
  restricted_loss: WireArray;
  excluded_loss: WireArray;
  fourier_norms: WireArray;
  neuron_frequency: WireArray;
  key_frequencies: number[];
  phases: number[];
  selected_checkpoint: number;
}

interface Data {
  steps: number[];
  train: number[];
  test: number[];
  ckpt: number[];
  restricted: number[];
  excluded: number[];
  norms: ArrayLike<number>;
  neurons: ArrayLike<number>;
  nFreq: number;
  nNeurons: number;
}

const CHART = { width: 340, height: 200, left: 56, right: 12, top: 12, bottom: 42 };
const PHASES = [
  { name: "memorisation", colour: "#f3e3f5" },
  { name: "circuit formation", colour: "#e3eef9" },
  { name: "cleanup", colour: "#e6f4e2" },
];

/** log10 of a loss, floored so a loss of 0 still has a place on the chart. */
function logLoss(v: number): number {
  return Math.log10(Math.max(v, 1e-9));
}

/** A loss for the status line: three significant figures, in exponent form below 0.001 (train losses reach 1e-7). */
export function lossText(v: number): string {
  return Number.isFinite(v) && v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential(2) : fmt(v, 3);
}

/** The phase a step falls in (0 memorisation, 1 circuit formation, 2 cleanup, 3 after), from [memorised, cleanup, grokked]. */
export function phaseOf(step: number, phases: readonly number[]): number {
  let phase = 0;
  for (const boundary of phases) {
    if (boundary >= 0 && step >= boundary) phase += 1;
    else break;
  }
  return phase;
}

export function renderGrokking({ model, el: root }: RenderProps<GrokkingTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as AnyModel<GrokkingTraits>;
  const panel = makePanel(root, "grokking", "cw-grokking");
  const cleanups: (() => void)[] = [];
  let data: Data | null = null;
  const slider = el(doc, "input") as HTMLInputElement;
  slider.type = "range";
  slider.min = "0";
  slider.setAttribute("aria-label", "checkpoint");
  const sliderLabel = el(doc, "label");
  sliderLabel.append(doc.createTextNode("Checkpoint "), slider);
  panel.controls.append(sliderLabel);

  function load(): void {
    try {
      const norms = decodeArray(m.get("fourier_norms"));
      const neurons = decodeArray(m.get("neuron_frequency"));
      const nums = (k: keyof GrokkingTraits & string): number[] => Array.from(decodeArray(m.get(k) as WireArray).data, Number);
      data = {
        steps: nums("steps"),
        train: nums("train_loss"),
        test: nums("test_loss"),
        ckpt: nums("checkpoint_steps"),
        restricted: nums("restricted_loss"),
        excluded: nums("excluded_loss"),
        norms: norms.data,
        neurons: neurons.data,
        nFreq: norms.shape[1] ?? 0,
        nNeurons: neurons.shape[1] ?? 0,
      };
      slider.max = String(Math.max(0, data.ckpt.length - 1));
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  function lossChart(d: Data, step: number, phases: number[]): HTMLDivElement {
    const box = el(doc, "div", "cw-grok-chart");
    box.append(el(doc, "div", "cw-chart-title", "Loss over training (log10 nats)"));
    const { width: W, height: H, left, right, top, bottom } = CHART;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const last = Math.max(d.steps[d.steps.length - 1] ?? 1, 1);
    const x = linearScale([0, last], [left, W - right]);
    const series = [
      { values: d.train.map(logLoss), at: d.steps, colour: "#0072B2", label: "train loss" },
      { values: d.test.map(logLoss), at: d.steps, colour: "#D55E00", label: "test loss" },
      { values: d.restricted.map(logLoss), at: d.ckpt, colour: "#009E73", label: "restricted loss (key frequencies only)" },
      { values: d.excluded.map(logLoss), at: d.ckpt, colour: "#CC79A7", label: "excluded loss (key frequencies removed)" },
    ];
    const all = series.flatMap((s) => s.values).filter(Number.isFinite);
    const y = linearScale([Math.min(...all, 0), Math.max(...all, 1)], [H - bottom, top]);
    const g = svgEl(doc, "g");
    const bounds = [0, ...phases.map((p) => (p >= 0 ? p : last)), last];
    for (let i = 0; i < PHASES.length; i++) {
      const a = bounds[i] ?? 0;
      const b = bounds[i + 1] ?? last;
      if (b <= a) continue;
      const band = svgEl(doc, "rect", { class: "cw-phase", x: x(a), y: top, width: Math.max(1, x(b) - x(a)), height: H - bottom - top, fill: PHASES[i]?.colour ?? "#eee" });
      svgTitle(doc, band, `${PHASES[i]?.name ?? ""}: steps ${a}–${b}`);
      g.append(band);
    }
    drawAxes(doc, g, x, y, { xLabel: "training step", yLabel: "log10 loss" });
    for (const s of series) {
      for (const points of polylineRuns(s.at, s.values, x, y)) {
        const line = svgEl(doc, "polyline", { points, fill: "none", stroke: s.colour, "stroke-width": 1.6 });
        svgTitle(doc, line, s.label);
        g.append(line);
      }
    }
    g.append(svgEl(doc, "line", { class: "cw-scrub", x1: x(step), x2: x(step), y1: top, y2: H - bottom, stroke: "#222", "stroke-width": 1.5 }));
    svg.append(g);
    const legend = el(doc, "div", "cw-legend");
    for (const s of series) {
      const item = el(doc, "span", "cw-legend-item");
      const sample = el(doc, "span", "cw-legend-line");
      sample.style.borderTop = `2px solid ${s.colour}`;
      item.append(sample, doc.createTextNode(s.label));
      legend.append(item);
    }
    for (let i = 0; i < PHASES.length; i++) {
      const item = el(doc, "span", "cw-legend-item");
      const sample = el(doc, "span", "cw-legend-band");
      sample.style.background = PHASES[i]?.colour ?? "#eee";
      item.append(sample, doc.createTextNode(PHASES[i]?.name ?? ""));
      legend.append(item);
    }
    box.append(svg, legend);
    return box;
  }

  function normsChart(d: Data, c: number, keys: number[]): HTMLDivElement {
    const box = el(doc, "div", "cw-grok-chart");
    box.append(el(doc, "div", "cw-chart-title", "Embedding norm per frequency"));
    const { width: W, height: H, left, right, top, bottom } = CHART;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const row = Array.from({ length: d.nFreq }, (_, f) => Number(d.norms[c * d.nFreq + f]));
    let top1 = 0;
    for (let ci = 0; ci < d.ckpt.length; ci++) for (let f = 1; f < d.nFreq; f++) top1 = Math.max(top1, Number(d.norms[ci * d.nFreq + f]));
    const x = linearScale([0, d.nFreq], [left, W - right]);
    const y = linearScale([0, Math.max(top1, 1e-9)], [H - bottom, top]);
    const g = svgEl(doc, "g");
    drawAxes(doc, g, x, y, { xLabel: "frequency k", yLabel: "norm" });
    const bw = Math.max(1, x(1) - x(0) - 0.5);
    for (let f = 1; f < d.nFreq; f++) {
      const v = row[f] ?? 0;
      const key = keys.includes(f);
      const bar = svgEl(doc, "rect", { class: key ? "cw-bar cw-key" : "cw-bar", x: x(f), y: y(v), width: bw, height: Math.max(0, y(0) - y(v)), fill: key ? "#D55E00" : "#888" });
      svgTitle(doc, bar, `frequency ${f}${key ? " (key)" : ""}: norm ${fmt(v, 3)}`);
      g.append(bar);
    }
    svg.append(g);
    box.append(svg);
    return box;
  }

  function neuronMap(d: Data, c: number): HTMLDivElement {
    const box = el(doc, "div", "cw-grok-chart");
    box.append(el(doc, "div", "cw-chart-title", "Neuron × frequency (share of variance)"));
    const canvas = el(doc, "canvas", "cw-neuron-map") as HTMLCanvasElement;
    canvas.width = d.nFreq;
    canvas.height = d.nNeurons;
    const ctx = canvas.getContext("2d");
    if (ctx !== null && d.nFreq > 0 && d.nNeurons > 0) {
      const img = ctx.createImageData(d.nFreq, d.nNeurons);
      const base = c * d.nNeurons * d.nFreq;
      for (let i = 0; i < d.nNeurons * d.nFreq; i++) {
        const v = Math.min(1, Math.max(0, Number(d.neurons[base + i]) || 0));
        const shade = Math.round(255 * (1 - v));
        img.data[4 * i] = shade;
        img.data[4 * i + 1] = shade;
        img.data[4 * i + 2] = 255;
        img.data[4 * i + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
    }
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `${d.nNeurons} neurons (rows) by ${d.nFreq} frequencies (columns); darker: more of the neuron's variance`);
    box.append(canvas, el(doc, "div", "cw-note", "rows: neurons (sorted by their frequency at the end); columns: frequency 0…p/2"));
    return box;
  }

  function draw(): void {
    setTitle(panel, "Grokking", String(m.get("title") ?? ""));
    if (data === null || data.ckpt.length === 0) {
      panel.body.replaceChildren(el(doc, "div", "cw-note", "No checkpoints to scrub."));
      panel.status.textContent = "No run";
      return;
    }
    const d = data;
    const c = indexOr(m.get("selected_checkpoint"), d.ckpt.length, d.ckpt.length - 1);
    slider.value = String(c);
    const step = d.ckpt[c] ?? 0;
    const phases = (m.get("phases") ?? []) as number[];
    const keys = (m.get("key_frequencies") ?? []) as number[];
    panel.body.replaceChildren(lossChart(d, step, phases), normsChart(d, c, keys), neuronMap(d, c));
    const i = Math.max(0, d.steps.findIndex((s) => s >= step));
    const phase = ["memorisation", "circuit formation", "cleanup", "grokked"][phaseOf(step, phases)] ?? "";
    panel.status.textContent =
      `step ${step} (${phase}): train loss ${lossText(d.train[i] ?? Number.NaN)}, test loss ${lossText(d.test[i] ?? Number.NaN)}, ` +
      `restricted ${lossText(d.restricted[c] ?? Number.NaN)}, excluded ${lossText(d.excluded[c] ?? Number.NaN)}; key frequencies ${keys.join(", ")}`;
  }

  const frame = perFrame(draw);
  cleanups.push(
    listen(slider, "input", () => {
      setTraits(m, { selected_checkpoint: Number(slider.value) });
      frame.schedule();
    }),
  );
  return runView(
    m, panel, frame, cleanups,
    {
      data: ["steps", "train_loss", "test_loss", "checkpoint_steps", "restricted_loss", "excluded_loss", "fourier_norms", "neuron_frequency"],
      redraw: ["title", "key_frequencies", "phases", "selected_checkpoint"],
    },
    load, draw,
  );
}
