// Pure pieces of the causal views (PatchingMap, LogitLens, LogitAttribution):
// the colour scale of a sweep, the labels of its axes, what a cell says on
// hover and what a click selects (tested without a DOM).

import type { ScoreScale } from "./headscores";
import { fmt } from "./svg";
import { tokenLabel } from "./tokens";

/**
 * The colour scale of a sweep's values (NaN ignored): diverging around 0,
 * symmetric; for a normalised metric, from min(0, smallest) to max(1, largest),
 * still white at 0 (so 1, clean behaviour restored, is a full colour).
 */
export function patchScale(values: ArrayLike<number>, normalised: boolean): ScoreScale {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as number;
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (normalised) {
    hi = Math.max(1, hi, -lo);
    return { kind: "diverging", lo: Math.min(0, lo), hi };
  }
  const limit = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
  return { kind: "diverging", lo: -limit, hi: limit };
}

/** One column's label on the position axis: the clean token, and the corrupted one where they differ. */
export interface AxisLabel {
  text: string;
  /** Full text when `text` is truncated (a tooltip), else null. */
  title: string | null;
  differs: boolean;
}

/** Longest token shown on an axis (the full text is in the tooltip). */
export const AXIS_TOKEN_CHARS = 10;

/**
 * Label of column `i`: for positions the clean token as visible text (spaces
 * `·`, newlines `⏎`), with `→ corrupted` where the prompts differ; else the
 * column's own label (`H3`, `N12`).
 */
export function axisLabel(colDim: string, labels: readonly string[], clean: readonly string[], corrupted: readonly string[], differ: ReadonlySet<number>, i: number): AxisLabel {
  if (colDim !== "pos" || clean[i] === undefined) return { text: labels[i] ?? String(i), title: null, differs: false };
  const a = tokenLabel(clean[i] as string, AXIS_TOKEN_CHARS);
  const differs = differ.has(i);
  if (!differs || corrupted[i] === undefined) return { text: a.text, title: a.title, differs };
  const b = tokenLabel(corrupted[i] as string, AXIS_TOKEN_CHARS);
  const full = `${tokenLabel(clean[i] as string).text} → ${tokenLabel(corrupted[i] as string).text}`;
  return { text: `${a.text}→${b.text}`, title: full, differs };
}

/** What a dim's index is called in words: `pos 3 'the'`, `L1H5`, `N12`. */
export function cellName(colDim: string, labels: readonly string[], clean: readonly string[], corrupted: readonly string[], differ: ReadonlySet<number>, layer: string, col: number): string {
  if (colDim === "") return layer;
  if (colDim === "head") return `${layer}${labels[col] ?? `H${col}`}`;
  if (colDim === "pos") {
    const token = clean[col] === undefined ? (labels[col] ?? "") : `'${tokenLabel(clean[col] as string).text}'`;
    const other = differ.has(col) && corrupted[col] !== undefined ? ` (corrupted '${tokenLabel(corrupted[col] as string).text}')` : "";
    return `${layer} · pos ${col} ${token}${other}`;
  }
  return `${layer} ${labels[col] ?? col}`;
}

/** A cell's value in words: "n/a" where it does not exist (NaN), else the number. */
export function cellValue(v: number, digits: number): string {
  return Number.isFinite(v) ? fmt(v, digits) : "n/a";
}

/** Which panel is shown: the selected head for head panels, else `selected_panel` (clamped). */
export function shownPanel(panelDim: string, selectedHead: number, selectedPanel: number, n: number): number {
  const want = panelDim === "head" ? selectedHead : selectedPanel;
  return Number.isInteger(want) && want >= 0 && want < n ? want : 0;
}

/** The column selected by the traits (head or position columns), or -1. */
export function selectedColumn(colDim: string, head: number, pos: number, nCols: number): number {
  const c = colDim === "head" ? head : colDim === "pos" ? pos : colDim === "" ? 0 : -1;
  return Number.isInteger(c) && c >= 0 && c < nCols ? c : -1;
}

/** The traits a click on (layer, col) of `panel` sets. */
export function clickPatch(colDim: string, panelDim: string, layer: number, col: number, panel: number): Record<string, number> {
  const out: Record<string, number> = { selected_layer: layer, selected_panel: panel };
  if (colDim === "head") out.selected_head = col;
  if (colDim === "pos") out.selected_pos = col;
  if (panelDim === "head") out.selected_head = panel;
  return out;
}

/** Word for a panel picker. */
export function panelWord(panelDim: string): string {
  return { head: "Head", sender: "Sender", neuron: "Neuron" }[panelDim] ?? "Panel";
}
