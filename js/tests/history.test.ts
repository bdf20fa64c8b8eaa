import { describe, expect, it } from "vitest";
import { formationText, headSeries, polylineRuns, seriesDomain } from "../src/lib/history";

describe("training history helpers", () => {
  it("reads one head's series out of [T, L, H]", () => {
    // T=2, L=2, H=3: value = 100 t + 10 l + h
    const data = Float32Array.from({ length: 12 }, (_, i) => 100 * Math.floor(i / 6) + 10 * Math.floor((i % 6) / 3) + (i % 3));
    expect(headSeries(data, 2, 2, 3, 1, 2)).toEqual([12, 112]);
    expect(headSeries(data, 2, 2, 3, 2, 0)).toEqual([]);
  });

  it("pads the domain and survives empty or flat series", () => {
    expect(seriesDomain([[0, 1]])).toEqual([-0.05, 1.05]);
    expect(seriesDomain([[Number.NaN]])).toEqual([0, 1]);
    expect(seriesDomain([[2, 2]])).toEqual([1.45, 2.55]);
  });

  it("breaks a line where a value was not logged", () => {
    const runs = polylineRuns([0, 1, 2, 3], [1, Number.NaN, 2, 3], (v) => v, (v) => v);
    expect(runs).toEqual(["0.0,1.0", "2.0,2.0 3.0,3.0"]);
  });

  it("says where induction heads form, or that they did not", () => {
    expect(formationText([1800, 2900, 3000])).toContain("around step 2900");
    expect(formationText([])).toContain("No induction heads");
  });
});

describe("series that were not logged", () => {
  it("marks an all-NaN series in its legend label and leaves a logged one alone", async () => {
    const { isLogged, seriesLabel } = await import("../src/lib/history");
    expect(isLogged([Number.NaN, Number.NaN])).toBe(false);
    expect(isLogged([Number.NaN, 0.2])).toBe(true);
    expect(seriesLabel("ICL", [Number.NaN])).toBe("ICL (not logged for this model)");
    expect(seriesLabel("ICL", [0.1, Number.NaN])).toBe("ICL");
    expect(seriesLabel("K", [], "none in layer 0")).toBe("K (none in layer 0)");
  });
});
