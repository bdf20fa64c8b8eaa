// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { makeLut } from "../src/lib/colour";
import { cellAt, drawHeatmap, EMPTY, rasterise } from "../src/lib/heatmap";

const GREY = makeLut(["#000000", "#ffffff"]);

describe("rasterise", () => {
  it("writes one pixel per cell through the LUT, empty cells transparent", () => {
    const cells = [
      [0, -1],
      [255, 128],
    ];
    const px = rasterise({ rows: 2, cols: 2, index: (r, c) => cells[r]?.[c] ?? 0 }, GREY);
    expect(Array.from(px.slice(0, 4))).toEqual([0, 0, 0, 255]);
    expect(Array.from(px.slice(4, 8))).toEqual([...EMPTY]);
    expect(Array.from(px.slice(8, 12))).toEqual([255, 255, 255, 255]);
    expect(px[12]).toBe(GREY[128 * 4]);
  });

  it("refuses a buffer that is too small", () => {
    expect(() => rasterise({ rows: 2, cols: 2, index: () => 0 }, GREY, new Uint8ClampedArray(4))).toThrow();
  });
});

describe("cellAt", () => {
  it("maps CSS pixels to cells, edges included", () => {
    expect(cellAt(0, 0, 100, 100, 4, 4)).toEqual({ row: 0, col: 0 });
    expect(cellAt(99.9, 99.9, 100, 100, 4, 4)).toEqual({ row: 3, col: 3 });
    expect(cellAt(30, 60, 100, 100, 4, 4)).toEqual({ row: 2, col: 1 });
    expect(cellAt(100, 0, 100, 100, 4, 4)).toBeNull();
    expect(cellAt(-1, 0, 100, 100, 4, 4)).toBeNull();
  });
});

describe("drawHeatmap", () => {
  it("sizes the canvas in CSS pixels even where 2D canvas is unavailable", () => {
    const canvas = document.createElement("canvas");
    drawHeatmap(canvas, { rows: 3, cols: 3, index: () => 0 }, GREY, { width: 90, height: 60 });
    expect(canvas.style.width).toBe("90px");
    expect(canvas.style.height).toBe("60px");
  });
});
