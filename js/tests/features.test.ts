import { describe, expect, it } from "vitest";
import type { NDArray } from "../src/lib/arrays";
import { columnWindow, histogramBars, searchUnits, short, unitExamples, type DashboardArrays } from "../src/lib/features";

const nd = (data: ArrayLike<number>, shape: number[], dtype: NDArray["dtype"] = "float32"): NDArray =>
  ({ data: dtype === "uint16" ? Uint16Array.from(data) : dtype === "int32" ? Int32Array.from(data) : dtype === "uint8" ? Uint8Array.from(data) : Float32Array.from(data), shape, dtype }) as NDArray;

// two units, two examples each (one top, one sample), windows of 3 tokens (centre 1); vocab of 3, index 3 = none
const vocab = ["a", "'quote", "\u202ez"];
const arrays: DashboardArrays = {
  ctxTokens: nd([3, 1, 0, 0, 2, 1, /* unit 1 */ 2, 2, 0, 3, 3, 3], [2, 2, 3], "uint16"),
  ctxShade: nd([0, 255, 10, 5, 128, 0, 1, 2, 3, 0, 0, 0], [2, 2, 3], "uint8"),
  exValue: nd([4, 1, 2, Number.NaN], [2, 2]),
  exQuantile: nd([Number.NaN, 0.25, Number.NaN, Number.NaN], [2, 2]),
};

describe("unitExamples", () => {
  it("reads a unit's windows as token strings and shades, dropping padding and absent examples", () => {
    const ex = unitExamples(arrays, vocab, 0, 0, 2, 1);
    expect(ex).toHaveLength(2);
    expect(ex[0]).toMatchObject({ value: 4, tokens: ["'quote", "a"], centre: 0 }); // (a window cut by the row's start)
    expect(ex[0]?.shades[0]).toBe(1);
    expect(ex[1]).toMatchObject({ value: 1, quantile: 0.25, tokens: ["a", "\u202ez", "'quote"], centre: 1 });
    expect(unitExamples(arrays, vocab, 1, 0, 2, 1)).toHaveLength(1); // (NaN: the unit had one example)
  });
});

describe("searchUnits", () => {
  it("matches the top example's own token or a promoted token", () => {
    const up = nd([0, 0, 1, 1], [2, 2], "int32");
    expect(searchUnits("quote", arrays, up, vocab, 1)).toEqual([0, 1]); // unit 0 by its centre, unit 1 by promotion
    expect(searchUnits("z", arrays, up, vocab, 1)).toEqual([1]);
    expect(searchUnits("", arrays, up, vocab, 1)).toEqual([]);
    expect(searchUnits("zzz", arrays, up, vocab, 1)).toEqual([]);
  });
});

describe("histogramBars", () => {
  it("keeps the non-empty span of bins with one empty bin each side", () => {
    const hist = nd([0, 0, 3, 0, 5, 0, 0, /* unit 1 */ 0, 0, 0, 0, 0, 0, 0], [2, 7], "int32");
    const edges = nd([1, 2, 3, 4, 5, 6, 7, 8], [8]);
    expect(histogramBars(hist, edges, 0)).toEqual([
      { lo: 2, hi: 3, count: 0 }, { lo: 3, hi: 4, count: 3 }, { lo: 4, hi: 5, count: 0 }, { lo: 5, hi: 6, count: 5 }, { lo: 6, hi: 7, count: 0 },
    ]);
    expect(histogramBars(hist, edges, 1)).toEqual([]);
  });
});

describe("columnWindow", () => {
  it("draws only the columns in view and a margin, within the strip", () => {
    expect(columnWindow(0, 960, 96, 5000, 16)).toEqual({ start: 0, end: 26 });
    expect(columnWindow(96 * 1000, 960, 96, 5000, 16)).toEqual({ start: 984, end: 1026 });
    expect(columnWindow(96 * 4995, 960, 96, 5000, 16)).toEqual({ start: 4979, end: 5000 });
    expect(columnWindow(0, 960, 96, 3)).toEqual({ start: 0, end: 3 });
  });
});

describe("short", () => {
  it("writes a few significant digits", () => {
    expect([short(3.214), short(12.34), short(123.4), short(0.001), short(-0.5), short(Number.NaN), short(12345)]).toEqual(["3.21", "12.3", "123", "1.0e-3", "-0.50", "–", "1.2e+4"]);
  });
});
