// TrainingHistory view: how a model's heads formed during training.
//
// Kernel → view: steps [T], val_loss [T], icl_score [T], previous_token,
// induction, ov_copying, k_composition [T, L, H], formation [start, step, end]
// or [], absent (why there is no history). View → kernel: selected_layer,
// selected_head (choose a head → its curves; shared with linked views).

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { el, listen } from "../lib/dom";
import { formationText, HEAD_CURVES, headSeries, isLogged, polylineRuns, seriesDomain, seriesLabel } from "../lib/history";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { drawAxes, headName, linearScale, svgEl, svgTitle } from "../lib/svg";
import "../styles/history.css";

export interface HistoryTraits {
  [key: string]: unknown;
  model_name: string;
  steps: WireArray;
  val_loss: WireArray;
  icl_score: WireArray;
  previous_token: WireArray;
  induction: WireArray;
  ov_copying: WireArray;
  k_composition: WireArray;
  formation: number[];
  absent: string;
  measure: string;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<HistoryTraits>;

interface Data {
  steps: number[];
  loss: number[];
  icl: number[];
  curves: Record<string, Float32Array>;
  nLayers: number;
  nHeads: number;
}

const CHART = { width: 300, height: 180, left: 56, right: 12, top: 12, bottom: 42 };

export function renderHistory({ model, el: root }: RenderProps<HistoryTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "history", "cw-history");
  const cleanups: (() => void)[] = [];
  let data: Data | null = null;
  const picker = el(doc, "select");
  picker.setAttribute("aria-label", "head");
  const pickLabel = el(doc, "label");
  pickLabel.append(doc.createTextNode("Head "), picker);
  panel.controls.append(pickLabel);
  const note = el(doc, "div", "cw-note");
  panel.body.after(note);

  function load(): void {
    try {
      const steps = Array.from(decodeArray(m.get("steps")).data, Number);
      const induction = decodeArray(m.get("induction"));
      const curves: Record<string, Float32Array> = {};
      for (const c of HEAD_CURVES) curves[c.key] = decodeArray(m.get(c.key)).data as Float32Array;
      data = {
        steps,
        loss: Array.from(decodeArray(m.get("val_loss")).data, Number),
        icl: Array.from(decodeArray(m.get("icl_score")).data, Number),
        curves,
        nLayers: induction.shape[1] ?? 0,
        nHeads: induction.shape[2] ?? 0,
      };
      picker.replaceChildren();
      for (let l = 0; l < data.nLayers; l++) {
        for (let h = 0; h < data.nHeads; h++) {
          const option = el(doc, "option", undefined, headName(l, h));
          option.value = `${l},${h}`;
          picker.append(option);
        }
      }
      clearError(panel);
    } catch (err) {
      data = null;
      showError(panel, err);
    }
  }

  function chart(title: string, steps: number[], series: { values: number[]; colour: string; dash: string; label: string; why?: string | undefined }[], yLabel: string, formation: number[]): HTMLDivElement {
    const box = el(doc, "div", "cw-history-chart");
    box.append(el(doc, "div", "cw-chart-title", title));
    const { width: W, height: H, left, right, top, bottom } = CHART;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const x = linearScale([Math.min(...steps, 0), Math.max(...steps, 1)], [left, W - right]);
    const y = linearScale(seriesDomain(series.map((s) => s.values)), [H - bottom, top]);
    const g = svgEl(doc, "g");
    if (formation.length === 3) {
      const [start, step, end] = formation as [number, number, number];
      const band = svgEl(doc, "rect", { class: "cw-formation", x: x(start), y: top, width: Math.max(1, x(end) - x(start)), height: H - bottom - top, fill: "#fde9c8" });
      svgTitle(doc, band, `induction heads form: steps ${start}–${end}`);
      g.append(band, svgEl(doc, "line", { x1: x(step), x2: x(step), y1: top, y2: H - bottom, stroke: "#d08a00", "stroke-dasharray": "4 3" }));
    }
    drawAxes(doc, g, x, y, { xLabel: "training step", yLabel, grid: true });
    for (const s of series) {
      for (const points of polylineRuns(steps, s.values, x, y)) {
        const line = svgEl(doc, "polyline", { points, fill: "none", stroke: s.colour, "stroke-width": 1.8, "stroke-dasharray": s.dash });
        svgTitle(doc, line, s.label);
        g.append(line);
      }
    }
    if (!series.some((s) => isLogged(s.values))) {
      const empty = svgEl(doc, "text", { class: "cw-not-logged", x: (left + W - right) / 2, y: (top + H - bottom) / 2, "text-anchor": "middle" });
      empty.textContent = "not logged for this model";
      g.append(empty);
    }
    svg.append(g);
    box.append(svg);
    {
      const legend = el(doc, "div", "cw-legend");
      for (const s of series) {
        const item = el(doc, "span", "cw-legend-item");
        const sample = el(doc, "span", "cw-legend-line");
        sample.style.borderTop = `2px ${s.dash ? "dashed" : "solid"} ${s.colour}`;
        item.append(sample, doc.createTextNode(seriesLabel(s.label, s.values, s.why)));
        legend.append(item);
      }
      box.append(legend);
    }
    return box;
  }

  function draw(): void {
    setTitle(panel, "Training history", String(m.get("model_name") ?? ""));
    const absent = String(m.get("absent") ?? "");
    if (absent || data === null || data.steps.length === 0) {
      panel.body.replaceChildren(el(doc, "div", "cw-note", absent ? `No training history: ${absent}.` : "No training history."));
      pickLabel.style.display = "none";
      note.textContent = "";
      panel.status.textContent = "No history";
      return;
    }
    pickLabel.style.display = "";
    const d = data;
    const layer = indexOr(m.get("selected_layer"), d.nLayers, 0);
    const head = indexOr(m.get("selected_head"), d.nHeads, 0);
    picker.value = `${layer},${head}`;
    const formation = (m.get("formation") ?? []) as number[];
    const loss = chart("Held-out loss (nats)", d.steps, [{ values: d.loss, colour: "#444", dash: "", label: "held-out loss" }], "nats", formation);
    const icl = chart(
      "In-context learning (nats)",
      d.steps,
      [{ values: d.icl, colour: "#E69F00", dash: "", label: "loss late in the window − loss early (lower: the context helps more)" }],
      "nats",
      formation,
    );
    const headChart = chart(
      `${headName(layer, head)} over training`,
      d.steps,
      HEAD_CURVES.map((c) => ({
        values: headSeries(d.curves[c.key] ?? [], d.steps.length, d.nLayers, d.nHeads, layer, head),
        colour: c.colour,
        dash: c.dash,
        label: c.label,
        why: c.key === "k_composition" && layer === 0 ? "none in layer 0: no earlier layer" : undefined,
      })),
      "score",
      formation,
    );
    panel.body.replaceChildren(loss, icl, headChart);
    note.textContent = [formationText(formation), String(m.get("measure") ?? "")].filter(Boolean).join(" ");
    const last = d.steps.length - 1;
    const ind = headSeries(d.curves.induction ?? [], d.steps.length, d.nLayers, d.nHeads, layer, head)[last];
    const prev = headSeries(d.curves.previous_token ?? [], d.steps.length, d.nLayers, d.nHeads, layer, head)[last];
    panel.status.textContent = `${headName(layer, head)} at step ${d.steps[last]}: induction ${(ind ?? Number.NaN).toFixed(2)}, previous-token ${(prev ?? Number.NaN).toFixed(2)}`;
  }

  const frame = perFrame(draw);
  cleanups.push(
    listen(picker, "change", () => {
      const [l, h] = picker.value.split(",").map(Number);
      setTraits(m, { selected_layer: l ?? 0, selected_head: h ?? 0 });
      frame.schedule();
    }),
  );
  return runView(
    m, panel, frame, cleanups,
    { data: ["steps", "val_loss", "icl_score", "previous_token", "induction", "ov_copying", "k_composition"], redraw: ["formation", "absent", "measure", "selected_layer", "selected_head", "model_name"] },
    load, draw,
  );
}
