// PatchingMap view: a causal sweep [n_panels, n_layers, n_cols] as a heatmap
// of layers × positions / heads / neurons, one panel (a head, a sender) at a
// time; hover shows a cell's value ("n/a" for NaN), click selects its layer,
// head and position.
//
// Kernel → view: values (float64), col_dim, panel_dim, labels, the clean and
// corrupted tokens with the positions that differ, normalised, title, metric,
// caption, scale_note, model_name. View → kernel: selected_layer,
// selected_head, selected_pos, selected_panel. Drawn in SVG so the figure
// exports as it looks; every token and label is set as text.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../lib/arrays";
import { DIVERGING, lutCss, lutLuminance } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { barTicks, scoreIndex, textWidth, valueDigits, type ScoreScale } from "../lib/headscores";
import { axisLabel, cellName, cellValue, clickPatch, panelWord, patchScale, selectedColumn, shownPanel } from "../lib/patchingmap";
import { clearError, makePanel, redrawOnResize, runView, setTitle, showError } from "../lib/panel";
import { perFrame, setTraits } from "../lib/selection";
import { fmt, svgEl, svgTitle } from "../lib/svg";
import "../styles/causal.css";

export interface PatchingMapTraits {
  [key: string]: unknown;
  values: WireArray;
  col_dim: string;
  panel_dim: string;
  layer_labels: string[];
  col_labels: string[];
  panel_labels: string[];
  clean_tokens: string[];
  corrupted_tokens: string[];
  differ: number[];
  normalised: boolean;
  title: string;
  metric: string;
  caption: string;
  scale_note: string;
  model_name: string;
  selected_layer: number;
  selected_head: number;
  selected_pos: number;
  selected_panel: number;
}

type Model = AnyModel<PatchingMapTraits>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const num = (v: unknown, fallback = -1): number => (typeof v === "number" && Number.isInteger(v) ? v : fallback);

export function renderPatchingMap({ model, el: root }: RenderProps<PatchingMapTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let values: NDArray | null = null;
  const shape = () => ({ panels: values?.shape[0] ?? 0, layers: values?.shape[1] ?? 0, cols: values?.shape[2] ?? 0 });
  const panel = makePanel(root, "patchingmap", "cw-patchingmap", () => `L${num(m.get("selected_layer"), 0)}`);
  const cleanups: (() => void)[] = [];
  const picker = el(doc, "select");
  picker.dataset.cwPanelPicker = "";
  const pickerLabel = el(doc, "label");
  const pickerWord = el(doc, "span");
  pickerLabel.append(pickerWord, picker);
  panel.controls.append(pickerLabel);
  const plot = el(doc, "div", "cw-plot cw-scroll");
  const note = el(doc, "div", "cw-note cw-caption");
  panel.body.append(plot, note);
  let hovered: { layer: number; col: number } | null = null;
  /** A clicked column of a dim with no selection trait (neurons). */
  let picked = -1;
  let drawn: ScoreScale | null = null;

  function load(): void {
    try {
      const v = decodeArray(m.get("values"));
      if (v.shape.length !== 3) throw new Error(`circuitwidgets: values must be [n_panels, n_layers, n_cols], got [${v.shape.join(", ")}]`);
      values = v;
      clearError(panel);
    } catch (err) {
      values = null;
      showError(panel, err);
    }
    const panelDim = String(m.get("panel_dim") ?? "");
    pickerWord.textContent = `${panelWord(panelDim)}:`;
    picker.replaceChildren(...strings(m.get("panel_labels")).map((label, i) => {
      const o = el(doc, "option", undefined, label);
      o.value = String(i);
      return o;
    }));
    pickerLabel.style.display = panelDim ? "" : "none";
  }

  const differSet = () => new Set(Array.isArray(m.get("differ")) ? (m.get("differ") as number[]) : []);
  const panelNow = () => shownPanel(String(m.get("panel_dim") ?? ""), num(m.get("selected_head")), num(m.get("selected_panel"), 0), shape().panels);

  function valueAt(p: number, layer: number, col: number): number {
    const { layers, cols } = shape();
    return (values?.data[(p * layers + layer) * cols + col] as number | undefined) ?? Number.NaN;
  }

  function describe(layer: number, col: number, s: ScoreScale): string {
    const colDim = String(m.get("col_dim") ?? "");
    const panelDim = String(m.get("panel_dim") ?? "");
    const p = panelNow();
    const layerName = strings(m.get("layer_labels"))[layer] ?? `L${layer}`;
    const where = cellName(colDim, strings(m.get("col_labels")), strings(m.get("clean_tokens")), strings(m.get("corrupted_tokens")), differSet(), layerName, col);
    const panelName = panelDim ? ` [${strings(m.get("panel_labels"))[p] ?? p}]` : "";
    return `${where}${panelName}: ${cellValue(valueAt(p, layer, col), valueDigits(s))}`;
  }

  function draw(): void {
    setTitle(panel, String(m.get("title") || "Patching map"), String(m.get("model_name") ?? ""));
    const { layers, cols } = shape();
    const p = panelNow();
    picker.value = String(p);
    if (values === null || layers === 0 || cols === 0) {
      drawn = null;
      plot.replaceChildren();
      note.textContent = "";
      return;
    }
    const colDim = String(m.get("col_dim") ?? "");
    const normalised = m.get("normalised") === true;
    const slice = values.data.subarray(p * layers * cols, (p + 1) * layers * cols);
    const s = patchScale(slice, normalised);
    const digits = valueDigits(s);
    const layerNames = strings(m.get("layer_labels"));
    const colNames = strings(m.get("col_labels"));
    const clean = strings(m.get("clean_tokens"));
    const corrupted = strings(m.get("corrupted_tokens"));
    const differ = differSet();
    const labels = Array.from({ length: cols }, (_, c) => axisLabel(colDim, colNames, clean, corrupted, differ, c));

    const longest = Math.max(...labels.map((l) => textWidth(l.text, 10)));
    const rotated = colDim === "pos";
    const left = Math.max(28, ...layerNames.map((l) => textWidth(l)), rotated ? Math.min(70, longest * 0.5) : 0) + 8;
    const available = Math.max(240, (root.clientWidth || 640) - left - 110);
    const cellW = Math.max(colDim === "neuron" ? 5 : 12, Math.min(46, Math.floor(available / cols)));
    const cellH = Math.max(18, Math.min(46, cellW));
    const gridW = cellW * cols;
    const gridH = cellH * layers;
    const rotate = rotated || cellW < longest + 4;
    const axisH = rotate ? Math.min(130, 14 + longest * 0.87) : 18;
    // column names above the grid, as the head-scores, composition and attention views put theirs
    const top = 10 + axisH;
    const barX = left + gridW + 18;
    const W = barX + 14 + 6 + textWidth(fmt(-s.hi, digits), 10) + 8;
    const H = top + gridH + 10;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-patchingmap-svg", role: "img" });
    svgTitle(doc, svg, `${String(m.get("title") ?? "patching")}: layers × ${colDim || "layer"}`);
    const grid = svgEl(doc, "g");
    const showNumbers = cellW >= 34 && cellH >= 20;
    for (let l = 0; l < layers; l++) {
      grid.append(svgEl(doc, "text", { x: left - 6, y: top + l * cellH + cellH / 2 + 4, "text-anchor": "end", "font-size": 11, fill: "#444" }, layerNames[l] ?? `L${l}`));
      for (let c = 0; c < cols; c++) {
        const v = slice[l * cols + c] as number;
        const missing = !Number.isFinite(v);
        const i = missing ? 0 : scoreIndex(v, s);
        const g = svgEl(doc, "g", { class: "cw-cell", "data-cw-layer": l, "data-cw-col": c, "data-cw-value": missing ? "n/a" : String(v) });
        g.append(svgEl(doc, "rect", { x: left + c * cellW, y: top + l * cellH, width: cellW, height: cellH, fill: missing ? "#f0f0f0" : lutCss(DIVERGING, i), stroke: "#fff", "stroke-width": cellW > 8 ? 1 : 0.3 }));
        if (missing && cellW >= 22) {
          g.append(svgEl(doc, "text", { x: left + c * cellW + cellW / 2, y: top + l * cellH + cellH / 2 + 3.5, "text-anchor": "middle", "font-size": 9, fill: "#888", "pointer-events": "none" }, "n/a"));
        } else if (showNumbers && !missing) {
          const ink = lutLuminance(DIVERGING, i) > 0.35 ? "#111" : "#fff";
          g.append(svgEl(doc, "text", { x: left + c * cellW + cellW / 2, y: top + l * cellH + cellH / 2 + 4, "text-anchor": "middle", "font-size": 9.5, fill: ink, "pointer-events": "none", "font-variant-numeric": "tabular-nums" }, fmt(v, Math.min(digits, 2))));
        }
        svgTitle(doc, g, describe(l, c, s));
        grid.append(g);
      }
    }
    // the column axis, above the grid: tokens (rotated; the positions that differ marked), heads, neurons
    const step = rotate ? Math.max(1, Math.ceil(11 / cellW)) : Math.max(1, Math.ceil((longest + 4) / cellW));
    const axis = svgEl(doc, "g", { class: "cw-axis" });
    for (let c = 0; c < cols; c++) {
      const label = labels[c] as (typeof labels)[number];
      if (c % step !== 0 && !label.differs) continue;
      const x = left + c * cellW + cellW / 2;
      const y = top - 6;
      const attrs = rotate
        ? { x: x + 3, y, "text-anchor": "start", transform: `rotate(-60 ${x + 3} ${y})`, "font-size": 10, fill: label.differs ? "#d55e00" : "#444", "font-weight": label.differs ? 600 : 400, "data-cw-axis": c }
        : { x, y: y - 1, "text-anchor": "middle", "font-size": 10, fill: "#444", "data-cw-axis": c };
      const holder = svgEl(doc, "g");
      holder.append(svgEl(doc, "text", attrs, label.text));
      if (label.title) svgTitle(doc, holder, label.title);
      axis.append(holder);
      if (label.differs) axis.append(svgEl(doc, "rect", { class: "cw-differ", x: left + c * cellW, y: top - 3, width: cellW, height: 3, fill: "#d55e00" }));
    }
    grid.append(axis);
    const layer = num(m.get("selected_layer"), 0);
    const col = colDim === "neuron" ? picked : selectedColumn(colDim, num(m.get("selected_head")), num(m.get("selected_pos")), cols);
    if (layer >= 0 && layer < layers) {
      const x = col >= 0 ? left + col * cellW : left;
      const w = col >= 0 ? cellW : gridW;
      grid.append(svgEl(doc, "rect", { class: "cw-selected", x: x + 1, y: top + layer * cellH + 1, width: Math.max(1, w - 2), height: cellH - 2, fill: "none", stroke: "#111", "stroke-width": 2, "pointer-events": "none" }));
    }
    svg.append(grid);
    svg.append(colourBar(s, barX, top, gridH, digits, normalised));
    plot.replaceChildren(svg);
    const scaleNote = String(m.get("scale_note") ?? "");
    const differNote = colDim === "pos" && differ.size ? " Orange: positions where the corrupted prompt differs (clean→corrupted)." : "";
    note.textContent = `${String(m.get("caption") ?? "")}. Colour: ${normalised ? `${String(m.get("metric") ?? "normalised metric")}, ${scaleNote}` : `${String(m.get("metric") ?? "value")}, diverging around 0`}.${differNote}`;
    drawn = s;
    status();
  }

  function colourBar(s: ScoreScale, x0: number, top: number, height: number, digits: number, normalised: boolean): SVGGElement {
    const bar = svgEl(doc, "g", { class: "cw-colourbar" });
    const steps = 48;
    const y = (v: number) => top + height - ((v - s.lo) / (s.hi - s.lo)) * height;
    for (let k = 0; k < steps; k++) {
      const v0 = s.lo + ((s.hi - s.lo) * k) / steps;
      const v1 = s.lo + ((s.hi - s.lo) * (k + 1)) / steps;
      bar.append(svgEl(doc, "rect", { x: x0, y: y(v1), width: 14, height: y(v0) - y(v1) + 0.5, fill: lutCss(DIVERGING, scoreIndex((v0 + v1) / 2, s)) }));
    }
    bar.append(svgEl(doc, "rect", { x: x0, y: top, width: 14, height, fill: "none", stroke: "#888", "stroke-width": 0.5 }));
    const ticks = barTicks(s, Math.max(2, Math.min(6, Math.floor(height / 22))));
    const values = normalised ? [...new Set([...ticks.values.filter((t) => Math.abs(t) > 1e-9 && Math.abs(t - 1) > 1e-9), 0, 1])] : ticks.values;
    for (const t of values) {
      if (t < s.lo - 1e-9 || t > s.hi + 1e-9) continue;
      bar.append(svgEl(doc, "line", { x1: x0 + 14, x2: x0 + 18, y1: y(t), y2: y(t), stroke: "#666" }));
      bar.append(svgEl(doc, "text", { class: "cw-tick", x: x0 + 20, y: y(t) + 3.5, "font-size": 10, fill: "#444", "font-variant-numeric": "tabular-nums" }, fmt(t, ticks.digits)));
    }
    return bar;
  }

  function status(): void {
    const { layers, cols } = shape();
    if (drawn === null || layers === 0) return;
    const focus = hovered && hovered.layer < layers && hovered.col < cols ? hovered : null;
    const colDim = String(m.get("col_dim") ?? "");
    const layer = num(m.get("selected_layer"), 0);
    const col = colDim === "neuron" ? picked : selectedColumn(colDim, num(m.get("selected_head")), num(m.get("selected_pos")), cols);
    if (focus) {
      panel.status.textContent = `${describe(focus.layer, focus.col, drawn)}${focus.layer === layer && focus.col === col ? " (selected)" : ""}`;
      return;
    }
    const what = col >= 0 ? describe(layer, col, drawn) : (strings(m.get("layer_labels"))[layer] ?? `L${layer}`);
    panel.status.textContent = `${what} selected; hover a cell for its value, click to select it`;
  }

  const frame = perFrame(draw);
  cleanups.push(redrawOnResize(root, frame)); // (its cells are sized to its width)
  const cellOf = (event: Event): { layer: number; col: number } | null => {
    const g = (event.target as Element | null)?.closest?.("[data-cw-layer][data-cw-col]");
    if (!g) return null;
    return { layer: Number(g.getAttribute("data-cw-layer")), col: Number(g.getAttribute("data-cw-col")) };
  };
  cleanups.push(
    listen(plot, "click", (event) => {
      const c = cellOf(event);
      if (c === null) return;
      picked = c.col;
      setTraits(m, clickPatch(String(m.get("col_dim") ?? ""), String(m.get("panel_dim") ?? ""), c.layer, c.col, panelNow()));
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const c = cellOf(event);
      if (c?.layer === hovered?.layer && c?.col === hovered?.col) return;
      hovered = c;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      status();
    }),
    listen(picker, "change", () => {
      const p = Number(picker.value);
      setTraits(m, String(m.get("panel_dim")) === "head" ? { selected_head: p, selected_panel: p } : { selected_panel: p });
      frame.schedule();
    }),
  );

  return runView(
    m,
    panel,
    frame,
    cleanups,
    {
      data: ["values", "panel_labels", "panel_dim"],
      redraw: ["col_dim", "layer_labels", "col_labels", "clean_tokens", "corrupted_tokens", "differ", "normalised", "title", "metric", "caption", "scale_note", "model_name", "selected_layer", "selected_head", "selected_pos", "selected_panel"],
    },
    load,
    draw,
  );
}
