// Canvas heatmaps: a grid of cells coloured through a lookup table.
//
// Drawing is split in two so that the costly part is testable without a
// browser: `rasterise` writes one RGBA pixel per cell into a buffer, and
// `drawHeatmap` puts that buffer on a canvas, scaled without smoothing so
// every cell stays a crisp square at any size.

import type { Lut } from "./colour";

/** A grid of cells, each a LUT index 0–255, or -1 for "no value" (drawn as `empty`). */
export interface CellSource {
  rows: number;
  cols: number;
  index(row: number, col: number): number;
}

export type RGBA = readonly [number, number, number, number];

/** Colour of cells without a value (for example above the causal diagonal). */
export const EMPTY: RGBA = [0, 0, 0, 0];

/** One RGBA pixel per cell, row-major, into `out` (allocated when omitted). */
export function rasterise(src: CellSource, lut: Lut, out?: Uint8ClampedArray, empty: RGBA = EMPTY): Uint8ClampedArray {
  const { rows, cols } = src;
  const pixels = out ?? new Uint8ClampedArray(rows * cols * 4);
  if (pixels.length < rows * cols * 4) throw new Error("circuitwidgets: heatmap pixel buffer too small");
  let p = 0;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++, p += 4) {
      const i = src.index(r, c);
      if (i < 0) {
        pixels[p] = empty[0];
        pixels[p + 1] = empty[1];
        pixels[p + 2] = empty[2];
        pixels[p + 3] = empty[3];
      } else {
        const j = (i > 255 ? 255 : i | 0) * 4;
        pixels[p] = lut[j] as number;
        pixels[p + 1] = lut[j + 1] as number;
        pixels[p + 2] = lut[j + 2] as number;
        pixels[p + 3] = lut[j + 3] as number;
      }
    }
  }
  return pixels;
}

/** A cell position in a heatmap. */
export interface Cell {
  row: number;
  col: number;
}

/**
 * The cell under a point given in CSS pixels relative to the heatmap's
 * top-left corner, for a heatmap drawn `width` × `height` CSS pixels; null
 * outside it.
 */
export function cellAt(x: number, y: number, width: number, height: number, rows: number, cols: number): Cell | null {
  if (!(x >= 0 && y >= 0 && x < width && y < height) || rows <= 0 || cols <= 0) return null;
  return { row: Math.min(rows - 1, Math.floor((y / height) * rows)), col: Math.min(cols - 1, Math.floor((x / width) * cols)) };
}

/** The cell under a mouse event on `canvas`, or null. */
export function cellAtEvent(event: MouseEvent, canvas: HTMLCanvasElement, rows: number, cols: number): Cell | null {
  const rect = canvas.getBoundingClientRect();
  return cellAt(event.clientX - rect.left, event.clientY - rect.top, rect.width, rect.height, rows, cols);
}

/** Options of `drawHeatmap`. */
export interface DrawOptions {
  /** Size in CSS pixels of the drawn heatmap. */
  width: number;
  height: number;
  empty?: RGBA;
}

/**
 * Draw `src` on `canvas` at `width` × `height` CSS pixels (sharp on high-DPI
 * screens). Returns the 2D context, scaled to CSS pixels, for overlays.
 */
export function drawHeatmap(canvas: HTMLCanvasElement, src: CellSource, lut: Lut, opts: DrawOptions): CanvasRenderingContext2D | null {
  const dpr = globalThis.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(opts.width * dpr));
  canvas.height = Math.max(1, Math.round(opts.height * dpr));
  canvas.style.width = `${opts.width}px`;
  canvas.style.height = `${opts.height}px`;
  const ctx = canvas.getContext("2d");
  if (ctx === null || src.rows === 0 || src.cols === 0) return ctx;

  const cells = canvas.ownerDocument.createElement("canvas");
  cells.width = src.cols;
  cells.height = src.rows;
  const cellCtx = cells.getContext("2d");
  if (cellCtx === null) return ctx;
  const image = cellCtx.createImageData(src.cols, src.rows);
  rasterise(src, lut, image.data, opts.empty);
  cellCtx.putImageData(image, 0, 0);

  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(cells, 0, 0, canvas.width, canvas.height);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

/** Outline cell rectangles (rows `r0..r1`, cols `c0..c1` inclusive) on a context scaled to CSS pixels. */
export function outlineCells(
  ctx: CanvasRenderingContext2D,
  rows: number,
  cols: number,
  width: number,
  height: number,
  r0: number,
  c0: number,
  r1: number = r0,
  c1: number = c0,
  colour = "#e4572e",
): void {
  const cw = width / cols;
  const ch = height / rows;
  ctx.save();
  ctx.strokeStyle = colour;
  ctx.lineWidth = 1.5;
  ctx.strokeRect(c0 * cw + 0.75, r0 * ch + 0.75, (c1 - c0 + 1) * cw - 1.5, (r1 - r0 + 1) * ch - 1.5);
  ctx.restore();
}

/**
 * `src` as an image of one pixel per cell (an offscreen canvas, to be scaled
 * onto a view with `blit`), or null where 2D canvas is unavailable. Reuses
 * `reuse` when given.
 */
export function cellImage(doc: Document, src: CellSource, lut: Lut, empty: RGBA = EMPTY, reuse?: HTMLCanvasElement): HTMLCanvasElement | null {
  const cells = reuse ?? doc.createElement("canvas");
  cells.width = Math.max(1, src.cols);
  cells.height = Math.max(1, src.rows);
  const ctx = cells.getContext("2d");
  if (ctx === null || src.rows === 0 || src.cols === 0) return null;
  const image = ctx.createImageData(src.cols, src.rows);
  rasterise(src, lut, image.data, empty);
  ctx.putImageData(image, 0, 0);
  return cells;
}

/** Draw a cell image into a rectangle of `ctx` (in the context's current units), cells kept crisp. */
export function blit(ctx: CanvasRenderingContext2D, image: CanvasImageSource, x: number, y: number, width: number, height: number): void {
  ctx.save();
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(image, x, y, width, height);
  ctx.restore();
}

/** Size a canvas to `width` × `height` CSS pixels (sharp on high-DPI screens); returns its context scaled to CSS pixels. */
export function sizeCanvas(canvas: HTMLCanvasElement, width: number, height: number): CanvasRenderingContext2D | null {
  const dpr = globalThis.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(width * dpr));
  const h = Math.max(1, Math.round(height * dpr));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== h) canvas.height = h;
  if (canvas.style.width !== `${width}px`) canvas.style.width = `${width}px`;
  if (canvas.style.height !== `${height}px`) canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx?.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}
