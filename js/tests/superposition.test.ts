import { describe, expect, it } from "vitest";
import type { NDArray } from "../src/lib/arrays";
import {
  dimensionalityPoints,
  featurePoints,
  logSliderPosition,
  logSliderValue,
  nearestLog,
  representedCount,
  sameValue,
  slot,
  snapshotOf,
  STICKY_FRACTIONS,
} from "../src/lib/superposition";

function array(shape: number[]): NDArray {
  const n = shape.reduce((a, b) => a * b, 1);
  return { data: Float32Array.from({ length: n }, (_, i) => i), dtype: "float32", shape };
}

describe("superposition helpers", () => {
  it("finds the nearest grid value in log scale", () => {
    const grid = [1, 0.1, 0.01];
    expect(nearestLog(grid, 0.3)).toBe(1); // log-nearer 0.1 than 1 (0.316 is the midpoint)
    expect(nearestLog(grid, 0.35)).toBe(0);
    expect(nearestLog(grid, 0.005)).toBe(2);
  });

  it("maps a log slider both ways", () => {
    expect(logSliderValue(0, 0.01, 1)).toBe(1);
    expect(logSliderValue(1000, 0.01, 1)).toBe(0.01);
    expect(logSliderValue(500, 0.01, 1)).toBe(0.1);
    for (const v of [1, 0.3, 0.05, 0.01]) expect(logSliderValue(logSliderPosition(v, 0.01, 1), 0.01, 1)).toBeCloseTo(v, 2);
  });

  it("slices a snapshot out of [P, D, T, ...rest]", () => {
    const a = array([2, 3, 4, 2, 5]);
    expect(slot(a, 1, 2, 3)).toEqual({ start: (((1 * 3 + 2) * 4 + 3) * 10), length: 10 });
    expect(Array.from(snapshotOf(a, 0, 0, 1))).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    expect(slot(a, 2, 0, 0).length).toBe(0); // out of range: empty, never another cell's data
  });

  it("reads feature columns as points in the plane", () => {
    const W = [1, 0, -1, /* row 2 */ 0, 1, 0]; // m = 2, n = 3
    expect(featurePoints(W, 2, 3)).toEqual([{ x: 1, y: 0 }, { x: 0, y: 1 }, { x: -1, y: 0 }]);
    expect(featurePoints([2, -3], 1, 2)).toEqual([{ x: 2, y: 0 }, { x: -3, y: 0 }]);
  });

  it("plots only represented features' dimensionality at 1/(1−S)", () => {
    const dims: NDArray = { data: Float32Array.from([1, 1, 0, 0.5, 0.5, 0.5]), dtype: "float32", shape: [2, 1, 1, 3] };
    const norms: NDArray = { data: Float32Array.from([1, 1, 0.1, 1, 1, 1]), dtype: "float32", shape: [2, 1, 1, 3] };
    const pts = dimensionalityPoints([1, 0.25], dims, norms, 0, 0);
    expect(pts.map((p) => [p.x, p.y, p.feature])).toEqual([[1, 1, 0], [1, 1, 1], [4, 0.5, 0], [4, 0.5, 1], [4, 0.5, 2]]);
    expect(representedCount([1, 0.2, 0.7])).toBe(2);
  });

  it("names the paper's sticky fractions", () => {
    expect(STICKY_FRACTIONS.map((f) => f.label)).toEqual(["1", "3/4", "2/3", "1/2", "2/5", "1/3"]);
    expect(sameValue(0.1, Math.fround(0.1))).toBe(true);
    expect(sameValue(0.1, 0.11)).toBe(false);
  });
});
