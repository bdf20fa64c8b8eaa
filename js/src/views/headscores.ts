// HeadScores view: one number per head, [n_layers, n_heads], as a heatmap
// with a colour bar; hover shows a cell's value, click selects its head.
//
// Kernel → view: scores [n_maps, L, H] (float64), names, notes, layer_labels,
// head_labels, scale, model_name. View → kernel: selected_map,
// selected_layer, selected_head. Drawn in SVG (a few hundred cells at most),
// so the figure exports as it looks; every label is set as text.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../lib/arrays";
import { DIVERGING, lutCss, lutLuminance, VIRIDIS } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { barTicks, cellSize, headLabel, layerLabel, scoreIndex, scoreScale, textWidth, valueDigits, type ScoreScale } from "../lib/headscores";
import { clearError, makePanel, redrawOnResize, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { fmt, headName, svgEl, svgTitle } from "../lib/svg";
import "../styles/headscores.css";

export interface HeadScoresTraits {
  [key: string]: unknown;
  model_name: string;
  scores: WireArray;
  names: string[];
  notes: string[];
  layer_labels: string[];
  head_labels: string[];
  scale: string;
  selected_map: number;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<HeadScoresTraits>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);

export function renderHeadScores({ model, el: root }: RenderProps<HeadScoresTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let scores: NDArray | null = null;
  const shape = () => ({ maps: scores?.shape[0] ?? 0, layers: scores?.shape[1] ?? 0, heads: scores?.shape[2] ?? 0 });
  const selection = () => {
    const { maps, layers, heads } = shape();
    return {
      map: indexOr(m.get("selected_map"), maps, 0),
      layer: indexOr(m.get("selected_layer"), layers, 0),
      head: indexOr(m.get("selected_head"), heads, 0),
    };
  };
  const panel = makePanel(root, "headscores", "cw-headscores", () => {
    const s = selection();
    return `${strings(m.get("names"))[s.map] ?? "scores"}-${headName(s.layer, s.head)}`;
  });
  const cleanups: (() => void)[] = [];
  let mapControl: ReturnType<typeof segmented> | null = null;
  const mapSlot = el(doc, "span");
  panel.controls.append(mapSlot);
  cleanups.push(() => mapControl?.cleanup());
  const plot = el(doc, "div", "cw-plot");
  const note = el(doc, "div", "cw-note");
  panel.body.append(plot, note);
  let hovered: { layer: number; head: number } | null = null;
  /** The scale of the map drawn last (the status line words values on it). */
  let drawn: ScoreScale | null = null;

  function load(): void {
    try {
      const s = decodeArray(m.get("scores"));
      if (s.shape.length !== 3) throw new Error(`circuitwidgets: scores must be [n_maps, n_layers, n_heads], got [${s.shape.join(", ")}]`);
      scores = s;
      clearError(panel);
    } catch (err) {
      scores = null;
      showError(panel, err);
    }
    const names = strings(m.get("names"));
    mapControl?.cleanup();
    mapControl = null;
    mapSlot.replaceChildren();
    if (names.length > 1) {
      mapControl = segmented(doc, "Map:", names.map((n, i) => ({ value: String(i), label: n })), (value) => {
        setTraits(m, { selected_map: Number(value) });
        frame.schedule();
      });
      mapSlot.append(mapControl.element);
    }
  }

  function valueAt(map: number, layer: number, head: number): number {
    const { layers, heads } = shape();
    return (scores?.data[(map * layers + layer) * heads + head] as number | undefined) ?? Number.NaN;
  }

  function describe(map: number, layer: number, head: number, s: ScoreScale): string {
    const layerNames = strings(m.get("layer_labels"));
    const headNames = strings(m.get("head_labels"));
    const named = layerNames.length || headNames.length ? ` (${layerLabel(layerNames, layer)}, ${headLabel(headNames, head)})` : "";
    const name = strings(m.get("names"))[map] ?? "score";
    return `${headName(layer, head)}${named}: ${name} ${fmt(valueAt(map, layer, head), valueDigits(s))}`;
  }

  function draw(): void {
    const names = strings(m.get("names"));
    const { map, layer, head } = selection();
    setTitle(panel, names[map] ?? "Head scores", String(m.get("model_name") ?? ""));
    mapControl?.update(String(map));
    const { layers, heads } = shape();
    if (scores === null || layers === 0 || heads === 0) {
      drawn = null;
      plot.replaceChildren();
      note.textContent = "";
      if (scores !== null) panel.status.textContent = "No heads to show";
      return;
    }
    const values = scores.data.subarray(map * layers * heads, (map + 1) * layers * heads);
    const s = scoreScale(values, String(m.get("scale") ?? "auto"));
    const lut = s.kind === "diverging" ? DIVERGING : VIRIDIS;
    const digits = valueDigits(s);
    const layerNames = strings(m.get("layer_labels"));
    const headNames = strings(m.get("head_labels"));

    const left = Math.max(28, ...Array.from({ length: layers }, (_, l) => textWidth(layerLabel(layerNames, l)))) + 8;
    const top = 20;
    const available = Math.max(200, (root.clientWidth || 560) - left - 90);
    const cell = cellSize(available, heads);
    const gridW = cell * heads;
    const gridH = cell * layers;
    const barX = left + gridW + 18;
    const W = barX + 14 + 6 + textWidth(fmt(-s.hi, digits), 10) + 6;
    const H = top + gridH + 26;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-headscores-svg", role: "img" });
    svgTitle(doc, svg, `${names[map] ?? "scores"} per head, layers × heads`);
    const grid = svgEl(doc, "g");
    const showNumbers = cell >= 34;
    for (let l = 0; l < layers; l++) {
      grid.append(svgEl(doc, "text", { x: left - 6, y: top + l * cell + cell / 2 + 4, "text-anchor": "end", "font-size": 11, fill: "#444" }, layerLabel(layerNames, l)));
      for (let h = 0; h < heads; h++) {
        const v = values[l * heads + h] as number;
        const i = scoreIndex(v, s);
        const g = svgEl(doc, "g", { class: "cw-cell", "data-cw-layer": l, "data-cw-head": h, "data-cw-value": String(v) });
        g.append(svgEl(doc, "rect", { x: left + h * cell, y: top + l * cell, width: cell, height: cell, fill: lutCss(lut, i), stroke: "#fff", "stroke-width": 1 }));
        if (showNumbers) {
          const ink = lutLuminance(lut, i) > 0.35 ? "#111" : "#fff";
          g.append(svgEl(doc, "text", { x: left + h * cell + cell / 2, y: top + l * cell + cell / 2 + 4, "text-anchor": "middle", "font-size": cell >= 42 ? 11 : 9.5, fill: ink, "pointer-events": "none", "font-variant-numeric": "tabular-nums" }, fmt(v, Math.min(digits, 3))));
        }
        svgTitle(doc, g, describe(map, l, h, s));
        grid.append(g);
      }
    }
    for (let h = 0; h < heads; h++) {
      const label = headLabel(headNames, h);
      if (cell >= textWidth(label, 10) || h % Math.ceil(textWidth(label, 10) / cell) === 0) {
        grid.append(svgEl(doc, "text", { x: left + h * cell + cell / 2, y: top - 6, "text-anchor": "middle", "font-size": 10, fill: "#444" }, label));
      }
    }
    grid.append(svgEl(doc, "rect", { class: "cw-selected", x: left + head * cell + 1, y: top + layer * cell + 1, width: cell - 2, height: cell - 2, fill: "none", stroke: "#e4572e", "stroke-width": 2.5, "pointer-events": "none" }));
    svg.append(grid);

    // colour bar: the scale from lo (bottom) to hi (top), with its numbers
    const bar = svgEl(doc, "g", { class: "cw-colourbar" });
    const steps = 48;
    const y = (v: number) => top + gridH - ((v - s.lo) / (s.hi - s.lo)) * gridH;
    for (let k = 0; k < steps; k++) {
      const v0 = s.lo + ((s.hi - s.lo) * k) / steps;
      const v1 = s.lo + ((s.hi - s.lo) * (k + 1)) / steps;
      bar.append(svgEl(doc, "rect", { x: barX, y: y(v1), width: 14, height: y(v0) - y(v1) + 0.5, fill: lutCss(lut, scoreIndex((v0 + v1) / 2, s)) }));
    }
    bar.append(svgEl(doc, "rect", { x: barX, y: top, width: 14, height: gridH, fill: "none", stroke: "#888", "stroke-width": 0.5 }));
    const ticks = barTicks(s, Math.max(2, Math.min(6, Math.floor(gridH / 24))));
    for (const t of ticks.values) {
      bar.append(svgEl(doc, "line", { x1: barX + 14, x2: barX + 18, y1: y(t), y2: y(t), stroke: "#666" }));
      bar.append(svgEl(doc, "text", { class: "cw-tick", x: barX + 20, y: y(t) + 3.5, "font-size": 10, fill: "#444", "font-variant-numeric": "tabular-nums" }, fmt(t, ticks.digits)));
    }
    svg.append(bar);
    plot.replaceChildren(svg);

    const notes = strings(m.get("notes"));
    const scaleNote = s.kind === "diverging" ? "diverging scale, white at 0" : `colour from ${fmt(s.lo, digits)} to ${fmt(s.hi, digits)}`;
    note.textContent = `${notes[map] ? `${notes[map]}. ` : ""}Rows: layers; columns: heads; ${scaleNote}.`;
    drawn = s;
    status();
  }

  /** The status line: the hovered head's value, else the selected head's. */
  function status(): void {
    const { layers, heads } = shape();
    if (drawn === null || layers === 0 || heads === 0) return;
    const { map, layer, head } = selection();
    const focus = hovered && hovered.layer < layers && hovered.head < heads ? hovered : null;
    panel.status.textContent = focus
      ? `${describe(map, focus.layer, focus.head, drawn)}${focus.layer === layer && focus.head === head ? " (selected)" : ""}`
      : `${describe(map, layer, head, drawn)} selected; hover a head for its value, click to select it`;
  }

  const frame = perFrame(draw);
  cleanups.push(redrawOnResize(root, frame)); // (its cells are sized to its width)

  const cellOf = (event: Event): { layer: number; head: number } | null => {
    const g = (event.target as Element | null)?.closest?.("[data-cw-layer][data-cw-head]");
    if (!g) return null;
    return { layer: Number(g.getAttribute("data-cw-layer")), head: Number(g.getAttribute("data-cw-head")) };
  };
  cleanups.push(
    listen(plot, "click", (event) => {
      const c = cellOf(event);
      if (c === null) return;
      setTraits(m, { selected_layer: c.layer, selected_head: c.head });
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const c = cellOf(event);
      if (c?.layer === hovered?.layer && c?.head === hovered?.head) return;
      hovered = c;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      status();
    }),
  );

  return runView(
    m,
    panel,
    frame,
    cleanups,
    { data: ["scores", "names"], redraw: ["notes", "layer_labels", "head_labels", "scale", "model_name", "selected_map", "selected_layer", "selected_head"] },
    load,
    draw,
  );
}
