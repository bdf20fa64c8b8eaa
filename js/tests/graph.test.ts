import { describe, expect, it } from "vitest";
import { allEdges, compValue, countEdgesAbove, edgeFloor, edgeId, edgeOr, edgePath, edgeWidth, KIND_STYLE, layeredLayout, parseEdgeId, scaledDash, strongestEdges, type CompData } from "../src/lib/graph";

function data(): CompData {
  // 3 layers, 2 heads; value = 0.1 * (k + 1) + l1 + 0.01 * h1 + 0.001 * h2 ... only where l1 < l2
  const L = 3, H = 2;
  const s = new Float32Array(3 * L * H * L * H).fill(Number.NaN);
  for (let k = 0; k < 3; k++)
    for (let l1 = 0; l1 < L; l1++)
      for (let h1 = 0; h1 < H; h1++)
        for (let l2 = l1 + 1; l2 < L; l2++)
          for (let h2 = 0; h2 < H; h2++) s[(((k * L + l1) * H + h1) * L + l2) * H + h2] = 0.1 * (k + 1) + 0.02 * l2 + 0.01 * h1 + 0.001 * h2;
  return { nLayers: L, nHeads: H, scores: s, baseline: 0.25 };
}

describe("composition graph logic", () => {
  it("reads scores only for an earlier head into a later one, raw or minus the baseline", () => {
    const d = data();
    expect(compValue(d, 1, 0, 1, 2, 0, false)).toBeCloseTo(0.2 + 0.04 + 0.01, 5);
    expect(compValue(d, 1, 0, 1, 2, 0, true)).toBeCloseTo(0.25 - 0.25 + 0.0, 5);
    expect(compValue(d, 0, 1, 0, 1, 0, false)).toBeNaN();
    expect(compValue(d, 0, 2, 0, 1, 0, false)).toBeNaN();
  });

  it("turns a raw-score threshold into the floor of the values shown, never below the baseline", () => {
    expect(edgeFloor(0.35, 0.25, true)).toBeCloseTo(0.1, 12);
    expect(edgeFloor(0.35, 0.25, false)).toBe(0.35);
    expect(edgeFloor(0.2, 0.25, true)).toBe(0); // a threshold under the baseline lets every edge above it through
    expect(edgeFloor(0, 0.25, true)).toBe(0);
    expect(edgeFloor(Number.NaN, 0.25, true)).toBe(0);
  });

  it("keeps only edges at or above the floor, and counts every edge that clears it", () => {
    const d = data();
    // V minus the baseline is 0.05 + 0.02 l2 + 0.01 h1 + 0.001 h2: at least 0.095 only into layer 2 from h1 = 1
    const kept = strongestEdges(d, ["V"], 10, true, 0.095);
    expect(kept.map((e) => edgeId(e)).sort()).toEqual(["0.1-2.0", "0.1-2.1", "1.1-2.0", "1.1-2.1"]);
    expect(kept.every((e) => e.value >= 0.095)).toBe(true);
    expect(countEdgesAbove(d, ["V"], true, 0.095)).toBe(4);
    expect(strongestEdges(d, ["V"], 2, true, 0.095)).toHaveLength(2); // the count still caps what is drawn
    // with no floor, every positive edge counts (the 12 V edges, none of Q or K's below the baseline but two)
    expect(countEdgesAbove(d, ["V"], true)).toBe(12);
    expect(countEdgesAbove(d, ["Q", "K", "V"], true)).toBe(countEdgesAbove(d, ["V"], true) + 2);
    expect(strongestEdges(d, ["V"], 100, true, 1)).toHaveLength(0);
  });

  it("lists every defined edge strongest first and keeps the n strongest positive ones", () => {
    const d = data();
    const all = allEdges(d, ["Q", "K", "V"], false);
    // pairs (l1 < l2): layer0→1: 4, layer0→2: 4, layer1→2: 4 per kind
    expect(all).toHaveLength(36);
    expect(all[0]).toMatchObject({ kind: "V", l2: 2, h1: 1, h2: 1 });
    for (let i = 1; i < all.length; i++) expect((all[i - 1] as { value: number }).value).toBeGreaterThanOrEqual((all[i] as { value: number }).value);
    const top = strongestEdges(d, ["V"], 3, true);
    expect(top.map((e) => e.kind)).toEqual(["V", "V", "V"]);
    expect(top.every((e) => e.value > 0)).toBe(true);
    // K minus the baseline is positive only for h1 = h2 = 1 into layer 2 (from layers 0 and 1)
    expect(strongestEdges(d, ["K"], 10, true).map((e) => edgeId(e)).sort()).toEqual(["0.1-2.1", "1.1-2.1"]);
    expect(strongestEdges(d, ["K"], 10, true)).toHaveLength(2);
    expect(strongestEdges(d, ["Q"], 10, true)).toHaveLength(0); // every Q score is below the baseline
  });

  it("names, parses and validates edges", () => {
    expect(edgeId({ l1: 0, h1: 1, l2: 2, h2: 3 })).toBe("0.1-2.3");
    expect(parseEdgeId("0.1-2.3")).toEqual([0, 1, 2, 3]);
    expect(parseEdgeId("0.1-2")).toBeNull();
    expect(edgeOr([0, 1, 1, 0], 2, 2)).toEqual([0, 1, 1, 0]);
    expect(edgeOr([1, 0, 0, 0], 2, 2)).toBeNull();
    expect(edgeOr([0, 2, 1, 0], 2, 2)).toBeNull();
    expect(edgeOr([], 2, 2)).toBeNull();
    expect(edgeOr("0.0-1.0", 2, 2)).toBeNull();
  });

  it("lays layers out left to right and heads top to bottom", () => {
    const layout = layeredLayout(3, 4, 300);
    expect(layout.node(0, 0).x).toBeLessThan(layout.node(1, 0).x);
    expect(layout.node(1, 0).x).toBeLessThan(layout.node(2, 0).x);
    expect(layout.node(0, 0).y).toBeLessThan(layout.node(0, 3).y);
    expect(layout.node(2, 3).y).toBeLessThan(layout.height);
    expect(edgePath({ x: 0, y: 0 }, { x: 100, y: 50 }, 5)).toBe("M5,0 C50,0 50,50 95,50");
    expect(edgeWidth(1, 1)).toBe(6);
    expect(edgeWidth(0.5, 1)).toBe(3.5);
    expect(edgeWidth(-1, 1)).toBe(1);
  });
});

describe("edge styles", () => {
  it("stretches a dash with the line's width, so a thick K-composition edge still reads as dashed", () => {
    expect(scaledDash(null, 8)).toBeNull();
    expect(scaledDash("7 3", 1)).toBe("7 3");
    expect(scaledDash("7 3", 8)).toBe("28 12");
  });
  it("never draws Q-composition in the heatmaps' below-baseline blue", () => {
    expect(KIND_STYLE.Q.colour.toUpperCase()).not.toBe("#0072B2");
    expect(new Set(Object.values(KIND_STYLE).map((s) => s.colour)).size).toBe(3);
  });
});
