// Small pieces of the attention view's interaction that are pure: when the
// wheel zooms, how the colour of a weight is scaled, how a zoomed view
// follows a selection made elsewhere, and how big the pattern may be drawn in
// the width its container gives. No DOM.

import type { CellSource } from "./heatmap";
import { headOffset, type Patterns, storedSide, triangleSize } from "./patterns";
import { clampView, isFull, type Viewport } from "./viewport";

/**
 * Whether a wheel event over the pattern zooms it (else the page scrolls):
 * only with Ctrl or ⌘ held, or once the pattern has the keyboard focus (a
 * click gives it), so scrolling a notebook past a pattern never gets stuck.
 */
export function wheelZooms(event: { ctrlKey: boolean; metaKey: boolean }, focused: boolean): boolean {
  return event.ctrlKey || event.metaKey || focused;
}

/** The hint next to the zoom controls. */
export const WHEEL_HINT = "Ctrl/⌘ + wheel (or click, then wheel) to zoom; drag to pan";

/** How a weight in [0, 1] maps to colour. */
export type ColourScale = "linear" | "row" | "gamma";

export const COLOUR_SCALES: readonly { value: ColourScale; label: string; title: string }[] = [
  { value: "linear", label: "0–1", title: "Colour proportional to the weight, 0 to 1" },
  { value: "row", label: "row max", title: "Each row scaled by its largest weight (long texts: shows where every row attends most)" },
  { value: "gamma", label: "√", title: "Colour ∝ √weight (γ = 0.5): small weights become visible" },
];

/** A colour-scale value from anything (linear when unknown). */
export function colourScaleOr(value: unknown): ColourScale {
  return value === "row" || value === "gamma" ? value : "linear";
}

/** LUT index (0–255, or -1 = empty) of quantised weight `q` (0–255) under `scale`; `rowMax` is the row's largest `q`. */
export function scaleIndex(q: number, scale: ColourScale, rowMax = 255): number {
  if (q < 0) return -1;
  if (scale === "linear" || q === 0) return q;
  if (scale === "row") return rowMax > 0 ? Math.min(255, Math.round((q * 255) / rowMax)) : 0;
  return Math.min(255, Math.round(255 * Math.sqrt(q / 255)));
}

/**
 * Largest quantised weight of each destination row `r0..r0+rows-1` of a head
 * over all its sources, pooled onto `outRows` rows (max of the rows in each
 * block), as `regionCells` pools them.
 */
export function rowMaxima(p: Patterns, layer: number, head: number, r0: number, rows: number, outRows: number): Uint8Array {
  const n = p.nTokens;
  const m = Math.max(1, Math.min(Math.floor(outRows), rows));
  const out = new Uint8Array(m);
  const base = headOffset(p, layer, head);
  for (let r = 0; r < rows; r++) {
    const dest = r0 + r;
    if (dest < 0 || dest >= n) continue;
    const start = p.causal ? base + triangleSize(dest) : base + dest * storedSide(p);
    const len = p.causal ? dest + 1 : n;
    let best = 0;
    for (let s = 0; s < len; s++) {
      const w = p.data[start + s] as number;
      if (w > best) best = w;
    }
    const b = Math.floor((r * m) / rows);
    if (best > (out[b] as number)) out[b] = best;
  }
  return out;
}

/** `cells` (indices are quantised weights) recoloured by `scale`; `maxima` per output row for "row". */
export function scaleCells(cells: CellSource, scale: ColourScale, maxima: Uint8Array | null): CellSource {
  if (scale === "linear") return cells;
  return {
    rows: cells.rows,
    cols: cells.cols,
    index: (r, c) => scaleIndex(cells.index(r, c), scale, maxima?.[r] ?? 255),
  };
}

/** Weights in [0, 1] (a row or column, for token shading) rescaled by `scale` (a new array; "row" divides by the largest). */
export function scaleWeights(values: Float32Array, scale: ColourScale): Float32Array {
  if (scale === "linear") return values;
  let max = 0;
  for (const v of values) if (v > max) max = v;
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as number;
    out[i] = !(v > 0) ? v : scale === "row" ? (max > 0 ? v / max : 0) : Math.sqrt(v);
  }
  return out;
}

/**
 * A zoomed view moved (same size) so that it shows `dest` (a row) and `src`
 * (a column) when they are set (≥ 0) and out of sight; the whole view and a
 * view already showing them are returned unchanged.
 */
export function followSelection(view: Viewport, n: number, dest: number, src: number): Viewport {
  if (isFull(view, n) || n <= 0) return view;
  const place = (start: number, i: number): number => {
    if (i < 0 || i >= n || (i >= start && i < start + view.size)) return start;
    return i - Math.floor(view.size / 2);
  };
  const next = clampView({ r0: place(view.r0, dest), c0: place(view.c0, src), size: view.size }, n);
  return next.r0 === view.r0 && next.c0 === view.c0 ? view : next;
}

/**
 * The side of the pattern (CSS px) that fits `available` px of width, given
 * the fixed margins around it (`chrome`): `preferred` when it fits, else as
 * much as fits but not below `min`.
 */
export function fitSide(preferred: number, available: number, chrome: number, min = 120): number {
  if (!(available > 0)) return preferred;
  return Math.max(min, Math.min(preferred, Math.floor(available - chrome)));
}
