import { describe, expect, it } from "vitest";
import { lossText, phaseOf } from "../src/views/grokking";

describe("grokking scrubber helpers", () => {
  it("puts a step in its phase from [memorised, cleanup, grokked]", () => {
    const phases = [140, 2300, 3380];
    expect([0, 139, 140, 2299, 2300, 3379, 3380, 4000].map((s) => phaseOf(s, phases))).toEqual([0, 0, 1, 1, 2, 2, 3, 3]);
    expect(phaseOf(5000, [140, -1, -1])).toBe(1); // never reached cleanup: still forming the circuit
    expect(phaseOf(10, [-1, -1, -1])).toBe(0);
  });

  it("writes tiny losses in exponent form, never as 0.000", () => {
    expect(lossText(1.8e-6)).toBe("1.80e-6");
    expect(lossText(19.91)).not.toContain("e");
    expect(lossText(0)).toBe("0.000");
  });
});
