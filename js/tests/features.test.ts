import { describe, expect, it } from "vitest";
import type { NDArray } from "../src/lib/arrays";
import { columnWindow, denseWords, histogramBars, searchUnits, short, sig3, unitExamples, type DashboardArrays } from "../src/lib/features";
import { compactToken } from "../src/lib/tokens";

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
  it("matches the top example's own token or a promoted token, and names the token that matched", () => {
    const up = nd([0, 0, 1, 1], [2, 2], "int32");
    // unit 0 by its centre, unit 1 by promotion: each labelled by the matched token, not by its own top token
    expect(searchUnits("quote", arrays, up, vocab, 1)).toEqual([
      { unit: 0, token: "'quote", where: "top" },
      { unit: 1, token: "'quote", where: "promotes" },
    ]);
    expect(searchUnits("z", arrays, up, vocab, 1)).toEqual([{ unit: 1, token: "\u202ez", where: "top" }]);
    expect(searchUnits("", arrays, up, vocab, 1)).toEqual([]);
    expect(searchUnits("zzz", arrays, up, vocab, 1)).toEqual([]);
  });
});

describe("histogramBars", () => {
  it("keeps the non-empty span of bins, its top cut at the unit's largest activation", () => {
    const hist = nd([0, 0, 3, 0, 5, 0, 0, /* unit 1 */ 0, 0, 0, 0, 0, 0, 0], [2, 7], "int32");
    const edges = nd([1, 2, 3, 4, 5, 6, 7, 8], [8]);
    expect(histogramBars(hist, edges, 0)).toEqual([{ lo: 3, hi: 4, count: 3 }, { lo: 4, hi: 5, count: 0 }, { lo: 5, hi: 6, count: 5 }]);
    // the axis ends where the header's "largest" does
    expect(histogramBars(hist, edges, 0, 5.5).at(-1)).toEqual({ lo: 5, hi: 5.5, count: 5 });
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

describe("sig3 and denseWords", () => {
  it("writes three significant figures, and the dense share in words", () => {
    expect([sig3(0.021349), sig3(-1.2549), sig3(44.51), sig3(123.4), sig3(12345), sig3(0.00012), sig3(0), sig3(Number.NaN)]).toEqual(["0.0213", "-1.25", "44.5", "123", "1.23e+4", "1.20e-4", "0", "–"]);
    expect(denseWords(0.1)).toBe("active on more than 10.0% of tokens");
  });
});

describe("compactToken", () => {
  it("writes whitespace runs as glyph and count, so indentation tokens of different lengths differ", () => {
    expect(compactToken("\n" + " ".repeat(16)).text).toBe("⏎·×16");
    expect(compactToken("\n" + " ".repeat(16)).title).toBe("1 newline, 16 spaces");
    const nine = [4, 5, 6, 7, 8, 9, 10, 11, 12].map((n) => compactToken("\n" + " ".repeat(n), 12).text);
    expect(new Set(nine).size).toBe(9);
    expect(Math.max(...nine.map((t) => t.length))).toBeLessThanOrEqual(6);
    expect(compactToken(" the")).toEqual({ text: "·the", title: null }); // (short runs as tokenLabel writes them)
    expect(compactToken("\t\t\tx").text).toBe("→×3x");
  });
});
