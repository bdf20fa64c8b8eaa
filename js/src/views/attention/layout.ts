// Geometry of the attention view's main canvas: the pattern's side, its
// margins for labels, the strip beside it (logit effect or loss, ./strip.ts), and what lies under a
// point. Pure (no DOM), so it is tested without a browser.

import { fitSide } from "../../lib/attentionui";
import { divergingIndex } from "../../lib/colour";
import type { CellSource, RGBA } from "../../lib/heatmap";
import { NONE } from "../../lib/selection";
import { cellOf, type Viewport } from "../../lib/viewport";

export const MAIN_MIN_PX = 220;
export const MAIN_MAX_PX = 440;
export const MAIN_CELL_PX = 26;
export const LEFT = 86; // margin for destination labels
export const TOP = 62; // margin for source labels
export const STRIP_GAP = 8;
export const STRIP_W = 12;
export const LABEL_MIN_CELL = 9; // cells at least this tall get token labels
export const EMPTY_RGBA: RGBA = [244, 244, 244, 255]; // above the causal diagonal
export const SELECT = "#D55E00"; // Okabe–Ito vermillion
export const HOVER = "#000000";
export const DIAGONAL_COLOURS = ["#E69F00", "#CC79A7", "#56B4E9", "#F0E442"];

export interface Layout {
  size: number; // heatmap side, CSS px
  left: number;
  top: number;
  strip: boolean;
  width: number;
  height: number;
}

/** A hovered destination and/or source (NONE when none). */
export interface Hover {
  dest: number;
  src: number;
}

/** The selection as the view reads it (indices checked against the data). */
export interface Sel {
  layer: number;
  head: number;
  dest: number;
  src: number;
}

/** The main canvas's layout for `n` tokens, fitted to `available` px of width when given. */
export function mainLayout(n: number, strip: boolean, available = 0): Layout {
  const right = strip ? STRIP_GAP + STRIP_W + 4 : 4;
  const size = fitSide(Math.min(MAIN_MAX_PX, Math.max(MAIN_MIN_PX, n * MAIN_CELL_PX)), available, LEFT + right);
  const width = LEFT + size + right;
  return { size, left: LEFT, top: TOP, strip, width, height: TOP + size + 4 };
}

/** Where a point (CSS px, relative to the canvas) falls: heatmap cell, strip row, label row/column, or nothing. */
export function hitTest(
  layout: Layout,
  view: Viewport,
  x: number,
  y: number,
): { area: "cell" | "strip" | "row" | "col"; row: number; col: number } | null {
  const fx = (x - layout.left) / layout.size;
  const fy = (y - layout.top) / layout.size;
  const inRows = fy >= 0 && fy < 1;
  const inCols = fx >= 0 && fx < 1;
  if (inRows && inCols) {
    const c = cellOf(view, fy, fx);
    return c === null ? null : { area: "cell", ...c };
  }
  if (inRows) {
    const row = view.r0 + Math.floor(fy * view.size);
    const stripX = layout.left + layout.size + STRIP_GAP;
    if (layout.strip && x >= stripX && x < stripX + STRIP_W) return { area: "strip", row, col: NONE };
    if (x < layout.left && x >= 0) return { area: "row", row, col: NONE };
  }
  if (inCols && y < layout.top && y >= 0) return { area: "col", row: NONE, col: view.c0 + Math.floor(fx * view.size) };
  return null;
}

/** The strip's cells: per row block of the view, the value of largest magnitude (NaN when none), as LUT indices
 * (`index`: diverging over ±`limit` unless given, as for the loss's sequential scale). */
export function stripCells(
  values: Float32Array,
  offset: number,
  view: Viewport,
  maxRows: number,
  limit: number,
  index: (v: number) => number = (v) => divergingIndex(v, limit),
): CellSource {
  const rows = Math.max(1, Math.min(view.size, Math.floor(maxRows)));
  const picked = new Float32Array(rows).fill(Number.NaN);
  for (let r = 0; r < view.size; r++) {
    const b = Math.floor((r * rows) / view.size);
    const v = values[offset + view.r0 + r] as number;
    const cur = picked[b] as number;
    if (!Number.isNaN(v) && (Number.isNaN(cur) || Math.abs(v) > Math.abs(cur))) picked[b] = v;
  }
  return { rows, cols: 1, index: (r) => (Number.isNaN(picked[r] as number) ? -1 : index(picked[r] as number)) };
}
