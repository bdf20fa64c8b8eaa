// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { TOP_SOURCES, topEntries } from "../src/views/attention/topsources";

describe("where a destination attends", () => {
  it("lists the largest weights first, the earlier position first on ties, and leaves out zeros", () => {
    expect(topEntries([0.1, 0.5, 0, 0.2, 0.2], 3)).toEqual([
      { index: 1, value: 0.5 },
      { index: 3, value: 0.2 },
      { index: 4, value: 0.2 },
    ]);
    expect(topEntries([0, 0, 1], 5)).toEqual([{ index: 2, value: 1 }]);
    expect(topEntries([0.3, 0.7], 0)).toEqual([]);
    expect(topEntries(new Float32Array(40).fill(0.025), TOP_SOURCES)).toHaveLength(TOP_SOURCES);
  });
});
