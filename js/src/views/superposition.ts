// Superposition view: toy models of superposition trained in the kernel.
//
// Kernel → view: grid_* [P, D, T, …] (the slider grid, trained up front),
// live_* [1, 1, T, …] (the model at the sliders' values: a grid cell, or
// retrained in the kernel), snapshot_steps [T], phase_* (one extra feature),
// live_probability / live_decay / training (what the kernel holds and does).
// View → kernel: feature_probability, decay (sliders: a live kernel retrains),
// step (the scrubber), selected_feature (linked views follow it).
// With no kernel (`__offline__`) the sliders move over the grid and the
// scrubber replays any grid model; the view says other values need a kernel.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../lib/arrays";
import { signLegend } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { logSliderPosition, logSliderValue, nearestLog, representedCount, sameValue, snapshotOf } from "../lib/superposition";
import { fmt } from "../lib/svg";
import "../styles/superposition.css";
import { arrowLegend, dimensionalityChart, geometryChart, gramChart, phaseChart, type Shown } from "./superposition/charts";

const FIELDS = ["W", "b", "loss", "norms", "superposition", "dimensionality", "gram"] as const;
type Field = (typeof FIELDS)[number];

export interface SuperpositionTraits {
  [key: string]: unknown;
  feature_probability: number;
  decay: number;
  step: number;
  selected_feature: number;
  live_probability: number;
  live_decay: number;
  training: string;
  recipe: string;
}

type Model = AnyModel<SuperpositionTraits>;
type Arrays = Record<Field, NDArray>;

interface Data {
  grid: Arrays;
  live: Arrays;
  probabilities: Float32Array;
  decays: Float32Array;
  steps: number[];
  phase: { densities: Float32Array; ratios: Float32Array; codes: NDArray; norm: NDArray };
  m: number;
  n: number;
}

function slider(doc: Document, label: string, max: number): { wrap: HTMLLabelElement; input: HTMLInputElement; value: HTMLSpanElement } {
  const wrap = el(doc, "label", "cw-slider");
  const input = el(doc, "input");
  input.type = "range";
  input.min = "0";
  input.max = String(max);
  input.setAttribute("aria-label", label);
  const value = el(doc, "span", "cw-slider-value");
  wrap.append(doc.createTextNode(`${label} `), input, value);
  return { wrap, input, value };
}

export function renderSuperposition({ model, el: root }: RenderProps<SuperpositionTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const offline = m.get("__offline__" as never) === true;
  const panel = makePanel(root, "superposition", "cw-superposition");
  const cleanups: (() => void)[] = [];
  const prob = slider(doc, "Feature probability 1 − S", 1000);
  const decay = slider(doc, "Importance decay", 1000);
  const scrub = slider(doc, "Training step", 0);
  prob.input.dataset.cwSlider = "probability";
  decay.input.dataset.cwSlider = "decay";
  scrub.input.dataset.cwSlider = "step";
  panel.controls.append(prob.wrap, decay.wrap, scrub.wrap);
  const note = el(doc, "div", "cw-note");
  panel.body.after(note);
  let data: Data | null = null;

  function load(): void {
    try {
      const read = (prefix: string) =>
        Object.fromEntries(FIELDS.map((f) => [f, decodeArray(m.get(`${prefix}_${f}`) as WireArray)])) as Arrays;
      const grid = read("grid");
      const shape = grid.W.shape;
      data = {
        grid,
        live: read("live"),
        probabilities: decodeArray(m.get("grid_probability") as WireArray).data as Float32Array,
        decays: decodeArray(m.get("grid_decay") as WireArray).data as Float32Array,
        steps: Array.from(decodeArray(m.get("snapshot_steps") as WireArray).data, Number),
        phase: {
          densities: decodeArray(m.get("phase_densities") as WireArray).data as Float32Array,
          ratios: decodeArray(m.get("phase_ratios") as WireArray).data as Float32Array,
          codes: decodeArray(m.get("phase") as WireArray),
          norm: decodeArray(m.get("phase_norm") as WireArray),
        },
        m: shape[3] ?? 0,
        n: shape[4] ?? 0,
      };
      scrub.input.max = String(Math.max(0, data.steps.length - 1));
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  const range = () => {
    const p = data?.probabilities ?? new Float32Array([1]);
    const d = data?.decays ?? new Float32Array([1]);
    return { pLo: Math.min(...p), pHi: Math.max(...p), dLo: Math.min(...d), dHi: 1 };
  };

  /** Which arrays hold the model at the sliders' values: the live ones when they match, else the nearest grid cell. */
  function source(d: Data): { arrays: Arrays; p: number; dd: number; live: boolean; cell: [number, number] } {
    const probability = Number(m.get("feature_probability"));
    const dec = Number(m.get("decay"));
    const cell: [number, number] = [nearestLog(d.probabilities, probability), nearestLog(d.decays, dec)];
    const liveMatches = sameValue(Number(m.get("live_probability")), probability) && sameValue(Number(m.get("live_decay")), dec);
    if (liveMatches && (d.live.W.shape[2] ?? 0) > 0) return { arrays: d.live, p: 0, dd: 0, live: true, cell };
    return { arrays: d.grid, p: cell[0], dd: cell[1], live: false, cell };
  }

  function draw(): void {
    setTitle(panel, "Toy models of superposition", String(m.get("recipe") ?? ""));
    const d = data;
    if (d === null || d.n === 0) {
      panel.body.replaceChildren(el(doc, "div", "cw-note", "No toy model to show."));
      return;
    }
    const probability = Number(m.get("feature_probability"));
    const dec = Number(m.get("decay"));
    const t = indexOr(m.get("step"), d.steps.length, d.steps.length - 1);
    const selected = indexOr(m.get("selected_feature"), d.n, -1, true);
    const { pLo, pHi, dLo, dHi } = range();
    if (doc.activeElement !== prob.input) prob.input.value = String(logSliderPosition(probability, pLo, pHi));
    if (doc.activeElement !== decay.input) decay.input.value = String(Math.round((1000 * (dec - dLo)) / Math.max(1e-9, dHi - dLo)));
    scrub.input.value = String(t);
    prob.value.textContent = fmt(probability, probability < 0.1 ? 3 : 2);
    decay.value.textContent = fmt(dec, 2);
    scrub.value.textContent = `${d.steps[t] ?? 0} of ${d.steps[d.steps.length - 1] ?? 0}`;
    const src = source(d);
    const pick = (f: Field) => snapshotOf(src.arrays[f], src.p, src.dd, t);
    // WᵀW's colour scale spans every snapshot of the model shown, so scrubbing does not rescale it
    let gramLimit = 0;
    for (let k = 0; k < d.steps.length; k++) for (const v of snapshotOf(src.arrays.gram, src.p, src.dd, k)) gramLimit = Math.max(gramLimit, Math.abs(v));
    const shown: Shown = {
      W: pick("W"), m: d.m, n: d.n, norms: pick("norms"), superposition: pick("superposition"),
      dimensionality: pick("dimensionality"), gram: pick("gram"), b: pick("b"), gramLimit, selected,
    };
    root.dataset.cwSource = src.live ? "live" : "grid";
    root.dataset.cwStep = String(d.steps[t] ?? 0);
    root.dataset.cwProbability = String(probability);
    root.dataset.cwLiveProbability = String(m.get("live_probability"));
    const box = (title: string, chart: SVGSVGElement, cls: string, ...extra: SVGSVGElement[]) => {
      const b = el(doc, "div", `cw-sp-chart ${cls}`);
      b.append(el(doc, "div", "cw-chart-title", title), chart, ...extra);
      return b;
    };
    const plane = d.m === 2 ? "Feature directions W_i in the hidden plane" : d.m === 1 ? "Feature directions W_i (one hidden dimension)" : `Feature directions W_i: hidden dimensions 1 and 2 of ${d.m} (a projection)`;
    const current = { x: 1 / probability, values: shown.dimensionality, norms: shown.norms };
    const charts = [
      box(plane, geometryChart(doc, shown), "cw-sp-geometry", arrowLegend(doc, d.n)),
      box("WᵀW, ‖W_i‖ coloured by superposition, and b", gramChart(doc, shown), "cw-sp-gram"),
      box(`Feature dimensionality (decay ${fmt(d.decays[src.cell[1]] ?? 0, 2)}; ○ the model shown)`, dimensionalityChart(doc, d.probabilities, d.grid.dimensionality, d.grid.norms, src.cell[1], t, current, selected), "cw-sp-dims"),
    ];
    if (d.phase.densities.length > 0) {
      charts.push(box("Phases of one extra feature (n = 2, m = 1)", phaseChart(doc, d.phase.densities, d.phase.ratios, d.phase.codes, d.phase.norm), "cw-sp-phase"));
    }
    panel.body.replaceChildren(...charts);
    const loss = pick("loss")[0] ?? Number.NaN;
    const kept = representedCount(shown.norms);
    // the values of the model drawn, never the sliders' when they differ (a retrain under way shows another model)
    const shownP = src.live ? Number(m.get("live_probability")) : (d.probabilities[src.cell[0]] ?? 0);
    const shownD = src.live ? Number(m.get("live_decay")) : (d.decays[src.cell[1]] ?? 0);
    root.dataset.cwShownProbability = String(shownP);
    const what = `model shown: 1 − S = ${fmt(shownP, 4)}, decay ${fmt(shownD, 2)}, step ${d.steps[t] ?? 0}: ${kept} of ${d.n} features represented, loss ${loss.toExponential(2)}`;
    const feature = selected >= 0 ? ` · feature ${selected}: ‖W‖ ${fmt(shown.norms[selected] ?? 0, 2)}, D ${fmt(shown.dimensionality[selected] ?? 0, 2)}` : "";
    const training = String(m.get("training") ?? "");
    let where = "";
    if (!src.live) {
      const gp = d.probabilities[src.cell[0]] ?? 0;
      const gd = d.decays[src.cell[1]] ?? 0;
      const asked = sameValue(gp, probability) && sameValue(gd, dec) ? "" : ` (sliders: 1 − S = ${fmt(probability, 4)}, decay ${fmt(dec, 2)})`;
      where = offline
        ? ` · exported page: the precomputed model nearest the sliders${asked}; other slider values need a live kernel`
        : training === "training"
          ? ` · retraining in the kernel at the sliders' values${asked}; the nearest precomputed model meanwhile`
          : training ? ` · the kernel's retrain failed: ${training}${asked}` : asked;
    }
    panel.status.textContent = `${what}${feature}${where}.`;
    note.textContent = `Arrows: each feature's direction W_i (dashed circle: norm 1). Heatmap: WᵀW (${signLegend("W_i·W_j > 0, pointing the same way", "opposed")}). Bars: ‖W_i‖, black when the feature has a dimension to itself, yellow when others overlap it, grey when it is not represented (‖W_i‖ ≤ 0.5: dead); b_i: each feature's output bias. Dimensionality: D_i = ‖W_i‖² / Σ_j (Ŵ_i·W_j)², dashed at the fractions features stick to. Click a feature to select it.`;
  }

  const frame = perFrame(draw);
  const snapToGrid = (values: Float32Array, v: number) => values[nearestLog(values, v)] ?? v;
  const sliderValues = () => {
    const { pLo, pHi, dLo, dHi } = range();
    let p = logSliderValue(Number(prob.input.value), pLo, pHi);
    let dv = Number((dLo + ((dHi - dLo) * Number(decay.input.value)) / 1000).toFixed(2));
    if (offline && data !== null) {
      p = snapToGrid(data.probabilities, p);
      dv = snapToGrid(data.decays, dv);
    }
    return { feature_probability: p, decay: dv };
  };
  cleanups.push(
    listen(prob.input, "input", () => {
      prob.value.textContent = fmt(sliderValues().feature_probability, 3);
    }),
    // the kernel retrains on release (change), not on every pixel of a drag
    listen(prob.input, "change", () => {
      setTraits(m, sliderValues());
      frame.schedule();
    }),
    listen(decay.input, "change", () => {
      setTraits(m, sliderValues());
      frame.schedule();
    }),
    listen(scrub.input, "input", () => {
      setTraits(m, { step: Number(scrub.input.value) });
      frame.schedule();
    }),
    listen(panel.body, "click", (event) => {
      const hit = (event.target as Element | null)?.closest?.("[data-cw-feature]");
      if (!hit) return;
      const i = Number(hit.getAttribute("data-cw-feature"));
      setTraits(m, { selected_feature: i === m.get("selected_feature") ? -1 : i });
      frame.schedule();
    }),
  );
  const arrays = FIELDS.flatMap((f) => [`grid_${f}`, `live_${f}`]);
  return runView(
    m, panel, frame, cleanups,
    {
      data: [...arrays, "grid_probability", "grid_decay", "snapshot_steps", "phase", "phase_densities", "phase_ratios", "phase_norm"],
      redraw: ["feature_probability", "decay", "step", "selected_feature", "live_probability", "live_decay", "training", "recipe"],
    },
    load, draw,
  );
}
