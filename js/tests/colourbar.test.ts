// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { DIVERGING } from "../src/lib/colour";
import { barTicks, colourBar } from "../src/lib/colourbar";
import { edgeOpacity, edgePoints, nearestEdge, polylineDistance } from "../src/lib/graph";

describe("colour bar", () => {
  it("labels both ends and round values between", () => {
    expect(barTicks(-0.3, 0.3)).toEqual([-0.3, 0, 0.3]);
    expect(barTicks(0, 0.47)[0]).toBe(0);
    expect(barTicks(0, 0.47).at(-1)).toBe(0.47);
  });

  it("draws the scale's colours with numbers as text", () => {
    const svg = colourBar(document, DIVERGING, -0.25, 0.25, "K-composition − baseline");
    const ticks = [...svg.querySelectorAll(".cw-colourbar-tick")].map((t) => t.textContent);
    expect(ticks).toEqual(["\u22120.25", "0.00", "0.25"]);
    expect(svg.querySelectorAll("rect").length).toBeGreaterThan(32);
    expect(svg.textContent).toContain("K-composition");
  });
});

describe("picking an edge", () => {
  it("picks the edge nearer to the pointer at a crossing, by distance to its curve", () => {
    // two edges crossing at the middle: (0,0)→(100,100) and (0,100)→(100,0)
    const a = edgePoints({ x: 0, y: 0 }, { x: 100, y: 100 }, 0);
    const b = edgePoints({ x: 0, y: 100 }, { x: 100, y: 0 }, 0);
    const crossing = { x: 50, y: 50 };
    expect(polylineDistance(crossing, a)).toBeLessThan(0.5);
    expect(polylineDistance(crossing, b)).toBeLessThan(0.5);
    // 3 px off the crossing, towards edge a's side below b
    const nearA = nearestEdge({ x: 47, y: 48 }, [b, a]);
    const da = polylineDistance({ x: 47, y: 48 }, a);
    const db = polylineDistance({ x: 47, y: 48 }, b);
    expect(nearA).toBe(da < db ? 1 : 0);
    expect(nearestEdge({ x: 0, y: 50 }, [a, b], 8)).toBe(-1);
  });

  it("shades edges by strength only", () => {
    expect(edgeOpacity(1, 1)).toBeCloseTo(0.95);
    expect(edgeOpacity(0.1, 1)).toBeLessThan(edgeOpacity(0.9, 1));
  });
});
