import { describe, expect, it } from "vitest";
import { DIVERGING, divergingIndex, lutCss, lutLuminance, makeLut, oklabToRgb, rgbToOklab, sequentialIndex, VIRIDIS } from "../src/lib/colour";

function rgb(lut: Uint8ClampedArray, i: number): [number, number, number] {
  return [lut[i * 4] as number, lut[i * 4 + 1] as number, lut[i * 4 + 2] as number];
}

describe("colour scales", () => {
  it("are 256-entry opaque RGBA tables", () => {
    for (const lut of [VIRIDIS, DIVERGING]) {
      expect(lut.length).toBe(1024);
      for (let i = 0; i < 256; i++) expect(lut[i * 4 + 3]).toBe(255);
    }
  });

  it("viridis runs from dark purple to yellow with evenly rising lightness", () => {
    expect(rgb(VIRIDIS, 0)).toEqual([0x44, 0x01, 0x54]);
    expect(rgb(VIRIDIS, 255)).toEqual([0xfd, 0xe7, 0x25]);
    const L = Array.from({ length: 256 }, (_, i) => rgbToOklab(rgb(VIRIDIS, i))[0]);
    const steps = L.slice(1).map((l, i) => l - (L[i] as number));
    const mean = ((L[255] as number) - (L[0] as number)) / 255;
    // rising everywhere up to 8-bit rounding, and evenly: no step over 3x the mean
    for (const s of steps) expect(s).toBeGreaterThan(-0.001);
    expect(Math.max(...steps)).toBeLessThan(3 * mean);
  });

  it("the diverging scale is near white at zero and equally light at ±v", () => {
    const mid = rgb(DIVERGING, divergingIndex(0, 1));
    for (const c of mid) expect(c).toBeGreaterThan(235);
    for (const v of [0.25, 0.5, 1]) {
      const lo = rgbToOklab(rgb(DIVERGING, divergingIndex(-v, 1)))[0];
      const hi = rgbToOklab(rgb(DIVERGING, divergingIndex(v, 1)))[0];
      expect(Math.abs(lo - hi)).toBeLessThan(0.08);
    }
    const [r, , b] = rgb(DIVERGING, divergingIndex(1, 1));
    expect(r).toBeGreaterThan(b); // positive is red
  });

  it("maps values to indices with clamping", () => {
    expect(sequentialIndex(-1)).toBe(0);
    expect(sequentialIndex(Number.NaN)).toBe(0);
    expect(sequentialIndex(0.5)).toBe(128);
    expect(sequentialIndex(7)).toBe(255);
    expect(divergingIndex(-3, 1)).toBe(0);
    expect(divergingIndex(3, 1)).toBe(255);
    expect(divergingIndex(1, 0)).toBe(128);
  });

  it("OKLab conversion round-trips", () => {
    for (const c of [[0, 0, 0], [255, 255, 255], [12, 200, 99], [253, 231, 37]] as const) {
      expect(oklabToRgb(rgbToOklab(c))).toEqual(c);
    }
  });

  it("gives CSS colours and luminance", () => {
    expect(lutCss(makeLut(["#000000", "#ffffff"]), 255)).toBe("rgb(255, 255, 255)");
    expect(lutLuminance(VIRIDIS, 255)).toBeGreaterThan(lutLuminance(VIRIDIS, 0));
  });
});
