import { describe, expect, it } from "vitest";
import { binRates, nextInBin, rateEdges, rateText } from "../src/views/neuronsparsity";

describe("neuron sparsity histogram helpers", () => {
  it("bins rates on log10 edges, a rate of 0 in the first bin and 1 in the last", () => {
    const edges = [-3, -2, -1, 0];
    expect(binRates([0, 0.0005, 0.005, 0.05, 0.5, 1], edges)).toEqual([[0, 1, 2], [3], [4, 5]]);
    expect(binRates([0.01, 0.1], edges)).toEqual([[], [0], [1]]); // an edge belongs to the bin above it
  });

  it("starts the edges at the half-decade below the smallest positive rate and ends at 1", () => {
    const edges = rateEdges([0, 0.003, 0.2], 5);
    expect(edges[0]).toBe(-3);
    expect(edges[5]).toBeCloseTo(0);
    expect(rateEdges([0, 0], 4)[0]).toBe(0); // nothing fires: no log range to draw (a single point at 1)
  });

  it("steps through a bin's neurons at each click, wrapping", () => {
    expect(nextInBin([3, 8, 40], 0)).toBe(3);
    expect(nextInBin([3, 8, 40], 8)).toBe(40);
    expect(nextInBin([3, 8, 40], 40)).toBe(3);
    expect(nextInBin([], 7)).toBe(7);
  });

  it("writes small rates with enough digits", () => {
    expect(rateText(0.25)).toBe("25.0 %");
    expect(rateText(0.0123)).toBe("1.23 %");
    expect(rateText(0.00042)).toBe("0.042 %");
  });
});
