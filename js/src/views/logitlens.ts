// LogitLens view: rows are the residual stream before each layer and after
// the last, columns the prompt's positions; each cell shows its top token (as
// text) shaded by its probability. Hover gives the top-k; a click selects the
// row (selected_layer) and the position (selected_pos). Long prompts scroll.
//
// Kernel → view: tokens, layer_labels, vocab, top_ids [rows, pos, k] (int32,
// indices into vocab), top_probs (float32), model_name. View → kernel:
// selected_layer, selected_pos.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../lib/arrays";
import { DIVERGING, lutCss, lutLuminance } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { textWidth } from "../lib/headscores";
import { percent, predictions, predictionText, probIndex } from "../lib/lens";
import { clearError, makePanel, redrawOnResize, runView, setTitle, showError } from "../lib/panel";
import { perFrame, setTraits } from "../lib/selection";
import { svgEl, svgTitle } from "../lib/svg";
import { tokenLabel } from "../lib/tokens";
import "../styles/causal.css";

export interface LogitLensTraits {
  [key: string]: unknown;
  tokens: string[];
  layer_labels: string[];
  vocab: string[];
  top_ids: WireArray;
  top_probs: WireArray;
  model_name: string;
  selected_layer: number;
  selected_pos: number;
}

type Model = AnyModel<LogitLensTraits>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const num = (v: unknown, fallback = -1): number => (typeof v === "number" && Number.isInteger(v) ? v : fallback);

/** Width of a cell, and the characters of its token that fit. */
const CELL_W = 62;
const CELL_CHARS = 8;

export function renderLogitLens({ model, el: root }: RenderProps<LogitLensTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let ids: NDArray | null = null;
  let probs: NDArray | null = null;
  const panel = makePanel(root, "logitlens", "cw-logitlens", () => `pos${num(m.get("selected_pos"), 0)}`);
  const cleanups: (() => void)[] = [];
  // the row labels stay put beside the grid, which scrolls sideways under its own tokens
  const frameBox = el(doc, "div", "cw-lens-frame");
  const rowLabels = el(doc, "div", "cw-lens-rows");
  const plot = el(doc, "div", "cw-plot cw-scroll");
  frameBox.append(rowLabels, plot);
  const note = el(doc, "div", "cw-note cw-caption");
  panel.body.append(frameBox, note);
  let hovered: { row: number; pos: number } | null = null;
  let scrolledTo = -1; // the position last scrolled to: a redraw for another reason leaves the user's scroll alone

  /** Scroll the grid sideways so that the column at `x` (a position chosen here or in a linked view) is in view. */
  function scrollIntoView(x: number): boolean {
    const view = plot.clientWidth;
    if (view <= 0) return false; // not laid out yet (hidden, or not painted): try again on the next draw
    if (x < plot.scrollLeft || x + CELL_W > plot.scrollLeft + view) plot.scrollLeft = Math.max(0, x + CELL_W / 2 - view / 2);
    return true;
  }

  function load(): void {
    try {
      const a = decodeArray(m.get("top_ids"));
      const b = decodeArray(m.get("top_probs"));
      if (a.shape.length !== 3 || b.shape.join() !== a.shape.join()) throw new Error(`circuitwidgets: top_ids and top_probs must be [rows, pos, k] alike, got [${a.shape.join(", ")}] and [${b.shape.join(", ")}]`);
      [ids, probs] = [a, b];
      clearError(panel);
    } catch (err) {
      [ids, probs] = [null, null];
      showError(panel, err);
    }
  }

  const shape = () => ({ rows: ids?.shape[0] ?? 0, pos: ids?.shape[1] ?? 0, k: ids?.shape[2] ?? 0 });
  const rowName = (r: number) => strings(m.get("layer_labels"))[r] ?? `row ${r}`;
  const tokenText = (p: number) => tokenLabel(strings(m.get("tokens"))[p] ?? "", 16).text;

  function describe(row: number, pos: number): string {
    if (ids === null || probs === null) return "";
    const preds = predictions(ids, probs, strings(m.get("vocab")), row, pos);
    return `${rowName(row)} · pos ${pos} '${tokenText(pos)}' predicts ${predictionText(preds)}`;
  }

  function draw(): void {
    setTitle(panel, "Logit lens", String(m.get("model_name") ?? ""));
    const { rows, pos } = shape();
    if (ids === null || probs === null || rows === 0 || pos === 0) {
      plot.replaceChildren();
      rowLabels.replaceChildren();
      return;
    }
    const vocab = strings(m.get("vocab"));
    const tokens = strings(m.get("tokens"));
    const labels = strings(m.get("layer_labels"));
    const labelW = Math.max(40, ...labels.map((l) => textWidth(l))) + 10;
    const left = 4; // (the grid's own margin: its row labels are in their own column, outside the scroller)
    const axisH = 58;
    // the positions' tokens above the grid, as every other map of the report names its columns
    const top = 8 + axisH;
    const cellH = 24;
    const gridH = rows * cellH;
    const W = left + pos * CELL_W + 10 + 60; // (the last label leans right past the grid)
    const H = top + gridH + 8;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-logitlens-svg", role: "img" });
    const names = svgEl(doc, "svg", { width: labelW, height: H, viewBox: `0 0 ${labelW} ${H}`, class: "cw-logitlens-rows", "aria-hidden": "true" });
    svgTitle(doc, svg, "Logit lens: the top prediction of the stream at each layer and position");
    const k = shape().k;
    for (let r = 0; r < rows; r++) {
      names.append(svgEl(doc, "text", { x: labelW - 6, y: top + r * cellH + cellH / 2 + 4, "text-anchor": "end", "font-size": 11, fill: "#444", "data-cw-row-label": r }, labels[r] ?? `row ${r}`));
      for (let p = 0; p < pos; p++) {
        const at = (r * pos + p) * k;
        const prob = probs.data[at] as number;
        const i = probIndex(prob);
        const g = svgEl(doc, "g", { class: "cw-cell", "data-cw-row": r, "data-cw-pos": p, "data-cw-prob": prob.toFixed(4) });
        g.append(svgEl(doc, "rect", { x: left + p * CELL_W, y: top + r * cellH, width: CELL_W, height: cellH, fill: lutCss(DIVERGING, i), stroke: "#fff", "stroke-width": 1 }));
        const word = tokenLabel(vocab[ids.data[at] as number] ?? "?", CELL_CHARS).text;
        g.append(svgEl(doc, "text", { class: "cw-top", x: left + p * CELL_W + CELL_W / 2, y: top + r * cellH + cellH / 2 + 4, "text-anchor": "middle", "font-size": 10.5, fill: lutLuminance(DIVERGING, i) > 0.4 ? "#111" : "#fff", "pointer-events": "none" }, word));
        svgTitle(doc, g, describe(r, p));
        svg.append(g);
      }
    }
    for (let p = 0; p < pos; p++) {
      const x = left + p * CELL_W + CELL_W / 2;
      const y = top - 6;
      const t = svgEl(doc, "text", { x, y, "text-anchor": "start", transform: `rotate(-35 ${x} ${y})`, "font-size": 10, fill: "#444", "data-cw-axis": p }, tokenLabel(tokens[p] ?? "", 12).text);
      svg.append(t);
    }
    const row = num(m.get("selected_layer"), rows - 1);
    const sel = num(m.get("selected_pos"));
    if (row >= 0 && row < rows) {
      const x = sel >= 0 && sel < pos ? left + sel * CELL_W : left;
      const w = sel >= 0 && sel < pos ? CELL_W : pos * CELL_W;
      svg.append(svgEl(doc, "rect", { class: "cw-selected", x: x + 1, y: top + row * cellH + 1, width: w - 2, height: cellH - 2, fill: "none", stroke: "#111", "stroke-width": 2, "pointer-events": "none" }));
    }
    plot.replaceChildren(svg);
    rowLabels.replaceChildren(names);
    if (sel < 0 || sel >= pos) scrolledTo = -1;
    else if (sel !== scrolledTo && scrollIntoView(left + sel * CELL_W)) scrolledTo = sel;
    note.textContent = `Rows: the residual stream before each layer and after the last, read through the final norm and the unembedding; columns: the prompt's positions (the cell predicts the next token). Each cell shows its top token, shaded by its probability: white 0% to red ${percent(1)}.`;
    status();
  }

  function status(): void {
    const { rows, pos } = shape();
    if (ids === null || rows === 0) return;
    if (hovered && hovered.row < rows && hovered.pos < pos) {
      panel.status.textContent = describe(hovered.row, hovered.pos);
      return;
    }
    const row = num(m.get("selected_layer"), rows - 1);
    const sel = num(m.get("selected_pos"));
    panel.status.textContent = sel >= 0 && sel < pos ? `${describe(row, sel)} (selected)` : `${rowName(row)} selected; hover a cell for its top predictions, click to select it`;
  }

  const frame = perFrame(draw);
  const cellOf = (event: Event): { row: number; pos: number } | null => {
    const g = (event.target as Element | null)?.closest?.("[data-cw-row][data-cw-pos]");
    return g ? { row: Number(g.getAttribute("data-cw-row")), pos: Number(g.getAttribute("data-cw-pos")) } : null;
  };
  cleanups.push(
    listen(plot, "click", (event) => {
      const c = cellOf(event);
      if (c === null) return;
      setTraits(m, { selected_layer: c.row, selected_pos: c.pos });
      frame.schedule();
    }),
    listen(plot, "mouseover", (event) => {
      const c = cellOf(event);
      if (c?.row === hovered?.row && c?.pos === hovered?.pos) return;
      hovered = c;
      status();
    }),
    listen(plot, "mouseleave", () => {
      hovered = null;
      status();
    }),
  );

  // after a resize the selected column is brought back into view (the user's own scroll is kept otherwise)
  cleanups.push(
    redrawOnResize(root, {
      schedule: () => {
        scrolledTo = -1; // (called only when the view's width changed)
        frame.schedule();
      },
    }),
  );
  return runView(m, panel, frame, cleanups, { data: ["top_ids", "top_probs"], redraw: ["tokens", "layer_labels", "vocab", "model_name", "selected_layer", "selected_pos"] }, load, draw);
}
