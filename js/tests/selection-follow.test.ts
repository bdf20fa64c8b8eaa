import { describe, expect, it } from "vitest";
import { exampleHeadName, parseHeadName } from "../src/lib/eigen";
import { edgeOfSelection } from "../src/lib/graph";

describe("the composition map's edge follows the selected head", () => {
  it("keeps an edge that ends at the selected head", () => {
    expect(edgeOfSelection([0, 11, 1, 5], 1, 5)).toEqual([0, 11, 1, 5]);
  });
  it("clears an edge into another head once a head is chosen elsewhere", () => {
    expect(edgeOfSelection([0, 11, 1, 5], 1, 7)).toBeNull();
    expect(edgeOfSelection([0, 11, 1, 5], 0, 5)).toBeNull();
    expect(edgeOfSelection(null, 1, 5)).toBeNull();
  });
});

describe("the head search's placeholder names a head of the model", () => {
  it("is the model's last head, which parses back", () => {
    expect(exampleHeadName(2, 12)).toBe("L1H11");
    expect(exampleHeadName(2, 8)).toBe("L1H7");
    const parsed = parseHeadName(exampleHeadName(2, 8), 2, 8);
    expect(parsed).toEqual({ layer: 1, head: 7 });
  });
  it("is a valid name before the data arrive", () => {
    expect(exampleHeadName(0, 0)).toBe("L0H0");
  });
});
