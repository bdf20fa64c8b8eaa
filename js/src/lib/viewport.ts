// Zoom and pan over a square n × n grid of cells (an attention pattern).
//
// A viewport shows rows `r0..r0+size-1` and columns `c0..c0+size-1`. It is
// square so that a diagonal stays at 45° and cells stay square. Pure
// functions, so that zooming around the pointer and dragging are tested
// without a browser.

export interface Viewport {
  r0: number;
  c0: number;
  size: number;
}

/** Fewest cells a zoomed view shows along a side. */
export const MIN_VIEW_CELLS = 8;

/** The whole grid. */
export function fullView(n: number): Viewport {
  return { r0: 0, c0: 0, size: Math.max(0, n) };
}

/** Whether the view shows the whole grid. */
export function isFull(view: Viewport, n: number): boolean {
  return view.r0 === 0 && view.c0 === 0 && view.size >= n;
}

/** `view` moved and resized into the grid: integer, at least `MIN_VIEW_CELLS` (or n) cells, inside [0, n). */
export function clampView(view: Viewport, n: number): Viewport {
  if (n <= 0) return fullView(0);
  const size = Math.max(Math.min(n, MIN_VIEW_CELLS), Math.min(n, Math.round(view.size)));
  const clamp = (v: number) => Math.max(0, Math.min(n - size, Math.round(v)));
  return { r0: clamp(view.r0), c0: clamp(view.c0), size };
}

/**
 * Zoom by `factor` (< 1 zooms in) keeping the cell under the pointer where it
 * is: `fy`, `fx` are the pointer's position as fractions (0–1) of the view's
 * height and width.
 */
export function zoomAt(view: Viewport, n: number, factor: number, fy: number, fx: number): Viewport {
  const size = Math.max(Math.min(n, MIN_VIEW_CELLS), Math.min(n, view.size * factor));
  const row = view.r0 + fy * view.size;
  const col = view.c0 + fx * view.size;
  return clampView({ r0: row - fy * size, c0: col - fx * size, size }, n);
}

/** Move the view by a number of cells (positive: towards later rows / columns). */
export function panBy(view: Viewport, n: number, dRows: number, dCols: number): Viewport {
  return clampView({ r0: view.r0 + dRows, c0: view.c0 + dCols, size: view.size }, n);
}

/** A view of `size` cells centred on cell (row, col). */
export function centreOn(n: number, row: number, col: number, size: number): Viewport {
  return clampView({ r0: row - size / 2, c0: col - size / 2, size }, n);
}

/** The cell (row, col) under a point at fractions `fy`, `fx` of the view, or null outside it. */
export function cellOf(view: Viewport, fy: number, fx: number): { row: number; col: number } | null {
  if (!(fy >= 0 && fy < 1 && fx >= 0 && fx < 1) || view.size <= 0) return null;
  return { row: view.r0 + Math.floor(fy * view.size), col: view.c0 + Math.floor(fx * view.size) };
}

/**
 * The part of the diagonal `dest - src = offset` inside the view, as cell
 * coordinates relative to the view `[row, col]` of its first and last cells,
 * or null when it misses the view.
 */
export function diagonalInView(view: Viewport, offset: number): { from: [number, number]; to: [number, number] } | null {
  // rows r in [r0, r0+size) with column r - offset in [c0, c0+size)
  const first = Math.max(view.r0, view.c0 + offset);
  const last = Math.min(view.r0 + view.size - 1, view.c0 + view.size - 1 + offset);
  if (first > last) return null;
  return { from: [first - view.r0, first - offset - view.c0], to: [last - view.r0, last - offset - view.c0] };
}

/** Evenly spaced, round tick positions (cell indices) for an axis showing `start..start+size-1`. */
export function ticks(start: number, size: number, maxTicks: number): number[] {
  if (size <= 0 || maxTicks <= 0) return [];
  const raw = size / Math.max(1, maxTicks);
  const pow = 10 ** Math.floor(Math.log10(Math.max(1, raw)));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw) ?? 10 * pow;
  const out: number[] = [];
  for (let t = Math.ceil(start / step) * step; t < start + size; t += step) out.push(t);
  return out;
}
