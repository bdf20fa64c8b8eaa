// Pure pieces of the attention view: streamed heads, region pooling, zoom and
// pan, hit testing, the logit strip, token shading.
// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { DIVERGING, divergingIndex } from "../src/lib/colour";
import {
  absMax,
  fillHead,
  headReady,
  isPlaceholder,
  pendingPatterns,
  readyCount,
  regionCells,
  toPatterns,
  triangleSize,
  weightAt,
} from "../src/lib/patterns";
import { applyShades, ATTENTION, shadeIndices, weightIndex } from "../src/lib/shading";
import { hitTest, mainLayout, stripCells } from "../src/views/attention";
import { cellOf, clampView, diagonalInView, fullView, MIN_VIEW_CELLS, panBy, ticks, zoomAt } from "../src/lib/viewport";

/** Causal heads where weight (d, s) = (7 * d + s + k) % 256 for head k, packed like Python. */
function causalHeads(nHeads: number, n: number): Uint8Array {
  const per = triangleSize(n);
  const out = new Uint8Array(nHeads * per);
  for (let k = 0; k < nHeads; k++) for (let d = 0; d < n; d++) for (let s = 0; s <= d; s++) out[k * per + triangleSize(d) + s] = (7 * d + s + k) % 256;
  return out;
}

describe("streamed heads", () => {
  it("recognises the [L, H, 0] placeholder and fills heads one at a time", () => {
    const n = 6;
    const placeholder = { data: new Uint8Array(0), dtype: "uint8" as const, shape: [2, 3, 0] };
    expect(isPlaceholder(placeholder, n)).toBe(true);
    const p = toPatterns(placeholder, n, true);
    expect(p.ready).not.toBeNull();
    expect(readyCount(p)).toBe(0);
    const all = causalHeads(6, n);
    const per = triangleSize(n);
    fillHead(p, 1, 2, all.subarray(5 * per, 6 * per));
    expect(headReady(p, 1, 2)).toBe(true);
    expect(headReady(p, 0, 0)).toBe(false);
    expect(weightAt(p, 1, 2, 4, 3)).toBe((7 * 4 + 3 + 5) % 256);
    for (let k = 0; k < 5; k++) fillHead(p, Math.floor(k / 3), k % 3, all.subarray(k * per, (k + 1) * per));
    expect(p.ready).toBeNull(); // complete
    expect(p.data).toEqual(all);
  });

  it("refuses a head of the wrong size or out of range", () => {
    const p = pendingPatterns(1, 2, 4, true);
    expect(() => fillHead(p, 0, 0, new Uint8Array(3))).toThrow(/does not fit/);
    expect(() => fillHead(p, 0, 2, new Uint8Array(10))).toThrow(/does not fit/);
  });

  it("an empty sequence is not a placeholder", () => {
    expect(isPlaceholder({ data: new Uint8Array(0), dtype: "uint8", shape: [1, 1, 0] }, 0)).toBe(false);
  });
});

describe("regionCells", () => {
  const n = 10;
  const p = toPatterns({ data: causalHeads(1, n), dtype: "uint8", shape: [1, 1, triangleSize(n)] }, n, true);

  it("gives every weight of a region when it fits, -1 above the diagonal", () => {
    const cells = regionCells(p, 0, 0, { r0: 3, c0: 2, rows: 4, cols: 4 }, 100);
    expect([cells.rows, cells.cols]).toEqual([4, 4]);
    for (let r = 0; r < 4; r++)
      for (let c = 0; c < 4; c++) expect(cells.index(r, c)).toBe(c + 2 > r + 3 ? -1 : weightAt(p, 0, 0, r + 3, c + 2));
  });

  it("max-pools a region larger than the pixels available", () => {
    const cells = regionCells(p, 0, 0, { r0: 0, c0: 0, rows: 10, cols: 10 }, 5);
    expect([cells.rows, cells.cols]).toEqual([5, 5]);
    // block (4, 0) covers rows 8-9, cols 0-1: max of (7d + s) % 256 there is 7 * 9 + 1 = 64
    expect(cells.index(4, 0)).toBe(64);
    expect(cells.index(0, 4)).toBe(-1); // wholly above the diagonal
  });

  it("clips a region that runs past the end", () => {
    const cells = regionCells(p, 0, 0, { r0: 8, c0: 8, rows: 5, cols: 5 }, 100);
    expect([cells.rows, cells.cols]).toEqual([2, 2]);
  });
});

describe("viewport", () => {
  it("zooms around the pointer, keeping the cell under it in place", () => {
    const v = zoomAt(fullView(1000), 1000, 0.5, 0.5, 0.25);
    expect(v.size).toBe(500);
    expect(v.c0 + 0.25 * v.size).toBeCloseTo(250, 0);
    expect(v.r0 + 0.5 * v.size).toBeCloseTo(500, 0);
  });

  it("never zooms past MIN_VIEW_CELLS nor out past the whole grid, and stays inside it", () => {
    let v = fullView(100);
    for (let i = 0; i < 50; i++) v = zoomAt(v, 100, 0.5, 1, 1);
    expect(v.size).toBe(MIN_VIEW_CELLS);
    expect(v.r0 + v.size).toBeLessThanOrEqual(100);
    for (let i = 0; i < 50; i++) v = zoomAt(v, 100, 2, 0, 0);
    expect(v).toEqual(fullView(100));
    expect(clampView({ r0: -5, c0: 500, size: 20 }, 100)).toEqual({ r0: 0, c0: 80, size: 20 });
  });

  it("pans by cells and stops at the edges", () => {
    const v = { r0: 10, c0: 10, size: 20 };
    expect(panBy(v, 100, 5, -3)).toEqual({ r0: 15, c0: 7, size: 20 });
    expect(panBy(v, 100, 500, -500)).toEqual({ r0: 80, c0: 0, size: 20 });
  });

  it("maps fractions of the view to cells", () => {
    expect(cellOf({ r0: 10, c0: 20, size: 10 }, 0.55, 0.05)).toEqual({ row: 15, col: 20 });
    expect(cellOf({ r0: 0, c0: 0, size: 10 }, 1, 0.5)).toBeNull();
  });

  it("finds the part of an offset diagonal inside the view", () => {
    // previous-token diagonal (dest - src = 1) in the whole 5 × 5 grid: (1, 0) .. (4, 3)
    expect(diagonalInView(fullView(5), 1)).toEqual({ from: [1, 0], to: [4, 3] });
    // a view of rows 10-19, columns 0-9: dest - src = 12 runs from row 12 (col 0) to row 19 (col 7)
    expect(diagonalInView({ r0: 10, c0: 0, size: 10 }, 12)).toEqual({ from: [2, 0], to: [9, 7] });
    expect(diagonalInView({ r0: 0, c0: 50, size: 10 }, 1)).toBeNull();
  });

  it("places round ticks", () => {
    expect(ticks(0, 2048, 6)).toEqual([0, 500, 1000, 1500, 2000]);
    expect(ticks(95, 10, 5)).toEqual([96, 98, 100, 102, 104]);
  });
});

describe("main canvas geometry", () => {
  const layout = mainLayout(100, true);
  const view = fullView(100);

  it("tells cells, the logit strip and the label margins apart", () => {
    const cell = layout.size / 100;
    expect(hitTest(layout, view, layout.left + 3.5 * cell, layout.top + 7.5 * cell)).toEqual({ area: "cell", row: 7, col: 3 });
    expect(hitTest(layout, view, layout.left + layout.size + 12, layout.top + 7.5 * cell)?.area).toBe("strip");
    expect(hitTest(layout, view, 5, layout.top + 7.5 * cell)).toEqual({ area: "row", row: 7, col: -1 });
    expect(hitTest(layout, view, layout.left + 3.5 * cell, 5)).toEqual({ area: "col", row: -1, col: 3 });
    expect(hitTest(layout, view, 2, 2)).toBeNull();
  });

  it("strip cells keep the largest |effect| of each block, NaN as no value", () => {
    const values = new Float32Array([0.1, -2, 0.5, Number.NaN, 3, 0.2]);
    const full = stripCells(values, 0, fullView(6), 100, 3);
    expect(full.rows).toBe(6);
    expect(full.index(1, 0)).toBe(divergingIndex(-2, 3));
    expect(full.index(3, 0)).toBe(-1);
    const pooled = stripCells(values, 0, fullView(6), 3, 3);
    expect([pooled.index(0, 0), pooled.index(1, 0), pooled.index(2, 0)]).toEqual([divergingIndex(-2, 3), divergingIndex(0.5, 3), divergingIndex(3, 3)]);
  });

  it("absMax ignores NaN", () => {
    expect(absMax(new Float32Array([1, -4, Number.NaN, 2]), 0, 4)).toBe(4);
    expect(absMax(new Float32Array([Number.NaN]), 0, 1)).toBe(0);
  });
});

describe("token shading", () => {
  it("maps weights to the wire's 255 steps, zero and NaN unshaded", () => {
    expect([weightIndex(0), weightIndex(Number.NaN), weightIndex(1 / 255), weightIndex(1), weightIndex(0.001)]).toEqual([-1, -1, 1, 255, -1]);
  });

  it("signed values use the diverging scale around zero", () => {
    const out = shadeIndices(new Float32Array([-2, 0, 2, Number.NaN]), new Int16Array(4), 2);
    expect(Array.from(out)).toEqual([0, -1, 255, -1]);
  });

  it("restyles only the spans whose shade changed", () => {
    const spans = Array.from({ length: 4 }, () => document.createElement("span"));
    const prev = new Int16Array(4).fill(-1);
    const key = new Int16Array(4);
    expect(applyShades(spans, Int16Array.from([-1, 255, 10, -1]), prev, ATTENTION, 0, key)).toBe(2);
    expect(spans[1]?.style.backgroundColor).not.toBe("");
    expect(spans[1]?.style.color).toBe("#fff"); // dark end: light text
    expect(applyShades(spans, Int16Array.from([-1, 255, 10, -1]), prev, ATTENTION, 0, key)).toBe(0);
    expect(applyShades(spans, Int16Array.from([-1, 255, 10, -1]), prev, DIVERGING, 1, key)).toBe(2); // another scale
    expect(applyShades(spans, Int16Array.from([-1, -1, 10, -1]), prev, DIVERGING, 1, key)).toBe(1);
    expect(spans[1]?.style.backgroundColor).toBe("");
  });

  it("the attention scale runs from light (0) to dark (1)", () => {
    const lum = (i: number) => (ATTENTION[i * 4] as number) + (ATTENTION[i * 4 + 1] as number) + (ATTENTION[i * 4 + 2] as number);
    for (let i = 1; i < 256; i++) expect(lum(i)).toBeLessThanOrEqual(lum(i - 1) + 3);
    expect(lum(0)).toBeGreaterThan(600);
    expect(lum(255)).toBeLessThan(60);
  });
});
