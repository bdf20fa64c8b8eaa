import { describe, expect, it } from "vitest";
import { fmt, headName, layerColour, layerShape, linearScale, niceTicks, OKABE_ITO, tickDigits } from "../src/lib/svg";

describe("svg helpers", () => {
  it("scales linearly and picks round ticks", () => {
    const s = linearScale([-1, 1], [0, 200]);
    expect(s(0)).toBe(100);
    expect(s(1)).toBe(200);
    expect(niceTicks(0, 1, 4)).toEqual([0, 0.5, 1]);
    expect(niceTicks(-1, 1, 4)).toEqual([-1, -0.5, 0, 0.5, 1]);
    expect(niceTicks(0, 7, 5)).toEqual([0, 2, 4, 6]);
    expect(niceTicks(Number.NaN, 1)).toEqual([]);
    // every tick label equals its position: 0.25 and 0.75 keep two decimals
    expect(tickDigits([0, 0.25, 0.5, 0.75, 1])).toBe(2);
    expect([0, 0.25, 0.5, 0.75, 1].map((t) => fmt(t, tickDigits([0, 0.25, 0.5, 0.75, 1])))).toEqual(["0.00", "0.25", "0.50", "0.75", "1.00"]);
    expect(tickDigits([-1, -0.5, 0, 0.5, 1])).toBe(1);
    expect(tickDigits([0, 2, 4, 6])).toBe(0);
    expect(tickDigits([0.25])).toBe(2);
  });

  it("formats numbers with a true minus sign and a dash for NaN", () => {
    expect(fmt(-0.123, 2)).toBe("\u22120.12");
    expect(fmt(0.001, 2)).toBe("0.00");
    expect(fmt(-0.001, 2)).toBe("0.00");
    expect(fmt(Number.NaN)).toBe("–");
  });

  it("colours layers with the colour-blind-safe palette and changes marker after eight", () => {
    expect(layerColour(0)).toBe(OKABE_ITO[0]);
    expect(layerColour(8)).toBe(OKABE_ITO[0]);
    expect(new Set(Array.from({ length: 8 }, (_, l) => layerColour(l))).size).toBe(8);
    expect(layerShape(0)).toBe("circle");
    expect(layerShape(8)).toBe("square");
    expect(headName(1, 2)).toBe("L1H2");
  });
});
