// The attention view's pure interaction pieces: wheel policy, colour scaling,
// following a selection, fitting the container.
import { describe, expect, it } from "vitest";
import { colourScaleOr, fitSide, followSelection, rowMaxima, scaleCells, scaleIndex, scaleWeights, wheelZooms } from "../src/lib/attentionui";
import { toPatterns, triangleSize } from "../src/lib/patterns";
import { fullView } from "../src/lib/viewport";

describe("wheel", () => {
  it("zooms only with Ctrl/⌘ or when the pattern has focus; otherwise the page scrolls", () => {
    expect(wheelZooms({ ctrlKey: false, metaKey: false }, false)).toBe(false);
    expect(wheelZooms({ ctrlKey: true, metaKey: false }, false)).toBe(true);
    expect(wheelZooms({ ctrlKey: false, metaKey: true }, false)).toBe(true);
    expect(wheelZooms({ ctrlKey: false, metaKey: false }, true)).toBe(true);
  });
});

describe("colour scales", () => {
  it("linear keeps the quantised weight, row scales by the row's max, gamma by the square root", () => {
    expect(scaleIndex(51, "linear")).toBe(51);
    expect(scaleIndex(51, "row", 102)).toBe(128);
    expect(scaleIndex(102, "row", 102)).toBe(255);
    expect(scaleIndex(64, "gamma")).toBe(Math.round(255 * Math.sqrt(64 / 255)));
    expect(scaleIndex(-1, "gamma")).toBe(-1);
    expect(scaleIndex(0, "row", 0)).toBe(0);
    expect(colourScaleOr("nonsense")).toBe("linear");
  });

  it("per-row maxima cover every source of the row, pooled by block", () => {
    const n = 4;
    const data = new Uint8Array(triangleSize(n));
    // row 2 peaks at 200 on source 0, row 3 at 90
    data[triangleSize(2) + 0] = 200;
    data[triangleSize(2) + 2] = 10;
    data[triangleSize(3) + 1] = 90;
    const p = toPatterns({ data, dtype: "uint8", shape: [1, 1, data.length] }, n, true);
    expect([...rowMaxima(p, 0, 0, 0, n, n)]).toEqual([0, 0, 200, 90]);
    expect([...rowMaxima(p, 0, 0, 0, n, 2)]).toEqual([0, 200]);
    const cells = scaleCells({ rows: 1, cols: 2, index: (_r, c) => (c === 0 ? 45 : 90) }, "row", new Uint8Array([90]));
    expect([cells.index(0, 0), cells.index(0, 1)]).toEqual([128, 255]);
  });

  it("token weights scale like the cells", () => {
    const w = new Float32Array([0, 0.25, 0.5]);
    expect([...scaleWeights(w, "row")]).toEqual([0, 0.5, 1]);
    expect(scaleWeights(w, "gamma")[1]).toBeCloseTo(0.5);
    expect(scaleWeights(w, "linear")).toBe(w);
  });
});

describe("following a selection", () => {
  it("moves a zoomed view to show a row selected out of sight, leaves a view that shows it", () => {
    const view = { r0: 1119, c0: 1119, size: 38 };
    const moved = followSelection(view, 2048, 1500, -1);
    expect(moved.size).toBe(38);
    expect(moved.r0 <= 1500 && 1500 < moved.r0 + moved.size).toBe(true);
    expect(moved.c0).toBe(1119);
    expect(followSelection(view, 2048, 1130, 1125)).toBe(view);
    const both = followSelection(view, 2048, 1500, 1400);
    expect(both.c0 <= 1400 && 1400 < both.c0 + both.size).toBe(true);
    expect(followSelection(fullView(50), 50, 40, 3)).toEqual(fullView(50));
    expect(followSelection(view, 2048, 2047, -1).r0).toBe(2048 - 38);
  });
});

describe("fitting the container", () => {
  it("keeps the preferred side when it fits and shrinks it to the available width otherwise", () => {
    expect(fitSide(440, 0, 110)).toBe(440);
    expect(fitSide(440, 900, 110)).toBe(440);
    expect(fitSide(440, 480, 110)).toBe(370);
    expect(fitSide(440, 150, 110)).toBe(120);
  });
});
