import { describe, expect, it } from "vitest";
import { activeNodes, binNodes, binSize, BIN_PX, centreX, clampX, drawChunk, EDGE_CAP, edgesInView, fitView, isFit, lodText, nodeWeights, panX, toScreen, zoomX } from "../src/lib/graphlod";

describe("the horizontal viewport", () => {
  it("fits, clamps inside the layout and never zooms past one layout px per screen px", () => {
    expect(fitView(1000)).toEqual({ x0: 0, span: 1000 });
    expect(clampX({ x0: -50, span: 400 }, 1000, 300)).toEqual({ x0: 0, span: 400 });
    expect(clampX({ x0: 900, span: 400 }, 1000, 300)).toEqual({ x0: 600, span: 400 });
    expect(clampX({ x0: 100, span: 10 }, 1000, 300)).toEqual({ x0: 100, span: 300 });
    expect(clampX({ x0: 100, span: 5000 }, 1000, 300)).toEqual({ x0: 0, span: 1000 });
    expect(isFit(fitView(1000), 1000)).toBe(true);
    expect(isFit({ x0: 10, span: 900 }, 1000)).toBe(false);
  });

  it("zooms about the pointer: the layout x under it stays under it", () => {
    const view = { x0: 200, span: 600 };
    const fx = 0.25;
    const at = view.x0 + view.span * fx;
    const zoomed = zoomX(view, 10_000, 100, 0.5, fx);
    expect(zoomed.span).toBe(300);
    expect(zoomed.x0 + zoomed.span * fx).toBeCloseTo(at, 9);
    expect(toScreen(at, zoomed, 800)).toBeCloseTo(800 * fx, 9);
  });

  it("pans by screen px in layout units, and centres", () => {
    expect(panX({ x0: 100, span: 400 }, 1000, 100, 200, 800)).toEqual({ x0: 200, span: 400 });
    expect(panX({ x0: 100, span: 400 }, 1000, 100, -800, 800)).toEqual({ x0: 0, span: 400 });
    expect(centreX(500, 200, 1000, 100)).toEqual({ x0: 400, span: 200 });
  });
});

describe("bins of positions", () => {
  it("bins only when columns are narrower than the nodes' spread, enough positions to make a bin wide", () => {
    expect(binSize(30, 24)).toBe(0);
    expect(binSize(2, 24)).toBe(Math.ceil(BIN_PX / 2));
    expect(binSize(20, 24)).toBe(1);
  });

  it("groups nodes by layer and run of positions, with counts, influence, pins and the selection", () => {
    // nodes: (layer, pos) = (-1,0) (-1,1) (-1,4) (0,1) (0,2) (0,5) (1,-1)
    const layer = [-1, -1, -1, 0, 0, 0, 1];
    const pos = [0, 1, 4, 1, 2, 5, -1];
    const influence = [1, 2, 3, 0.5, Number.NaN, 4, 1];
    const active = new Uint8Array([1, 0, 1, 1, 1, 0, 0]);
    const bins = binNodes(layer, pos, influence, 4, 0, 7, { pinned: new Set([4]), selected: 5, active });
    const key = (b: { layer: number; from: number }) => `${b.layer}/${b.from}`;
    const byKey = new Map(bins.map((b) => [key(b), b]));
    expect([...byKey.keys()].sort()).toEqual(["-1/0", "-1/4", "0/0", "0/4", "1/0"]);
    expect(byKey.get("-1/0")).toMatchObject({ nodes: [0, 1], influence: 3, active: 1, pinned: 0, selected: false, to: 3 });
    expect(byKey.get("0/0")).toMatchObject({ nodes: [3, 4], influence: 0.5, pinned: 1, active: 2 });
    expect(byKey.get("0/4")).toMatchObject({ nodes: [5], selected: true });
    // every node is in exactly one bin: nothing is dropped
    expect(bins.flatMap((b) => b.nodes).sort()).toEqual([0, 1, 2, 3, 4, 5, 6]);
    // only the positions asked for
    expect(binNodes(layer, pos, influence, 4, 4, 7, { pinned: new Set(), selected: -1, active }).flatMap((b) => b.nodes).sort()).toEqual([2, 5]);
  });
});

describe("edges and nodes", () => {
  const src = [0, 1, 2, 0];
  const dst = [3, 3, 3, 2];
  const weight = [-2, 1, 0.5, 3];

  it("sums |weight| in and out of each node over the first `count` edges, as one pass per node would", () => {
    const { into, out } = nodeWeights(4, src, dst, weight, 3);
    for (let i = 0; i < 4; i++) {
      let a = 0;
      let b = 0;
      for (let e = 0; e < 3; e++) {
        if (dst[e] === i) a += Math.abs(weight[e] as number);
        if (src[e] === i) b += Math.abs(weight[e] as number);
      }
      expect(into[i]).toBeCloseTo(a, 12);
      expect(out[i]).toBeCloseTo(b, 12);
    }
  });

  it("marks the nodes kept edges touch", () => {
    expect(Array.from(activeNodes(5, src, dst, [false, true, false, true]))).toEqual([1, 1, 1, 1, 0]);
  });

  it("culls kept edges whose both ends are off screen on one side, keeping the strongest-first order", () => {
    const xs = [-100, 50, 500, 900];
    const found = edgesInView([true, true, false, true], src, dst, xs, 0, 400);
    // edge 0: -100 → 900 crosses the view; 1: 50 → 900 starts in it; 2 is not kept; 3: -100 → 500 crosses it
    expect(Array.from(found.edges)).toEqual([0, 1, 3]);
    expect(found.kept).toBe(3);
    expect(Array.from(edgesInView([true, true, true, true], src, dst, [600, 700, 800, 900], 0, 400).edges)).toEqual([]);
  });

  it("draws a chunk until the budget is spent, and the rest later", () => {
    let t = 0;
    const drawn: number[] = [];
    const next = drawChunk(0, 1000, 5, () => t, (k) => {
      drawn.push(k);
      t += 0.1; // 0.1 ms an edge: 32-edge steps until 5 ms
    });
    expect(next).toBe(64);
    expect(drawn).toEqual(Array.from({ length: 64 }, (_, k) => k));
    expect(drawChunk(990, 1000, 5, () => 0, () => {})).toBe(1000);
  });
});

describe("the level-of-detail text", () => {
  const base = { drawn: 5000, inView: 5000, kept: 43297, total: 50000, nodes: 0, bins: 0, binPositions: 0, drawing: false };

  it("says when only the strongest are drawn, how many are outside the view and how to see more", () => {
    const text = lodText({ ...base, drawn: EDGE_CAP, inView: 40000, nodes: 1340, bins: 70, binPositions: 23 });
    expect(text).toContain(`showing the 20,000 strongest of 40,000 edges in view`);
    expect(text).toContain("43,297 kept of 50,000, 3,297 outside the view");
    expect(text).toContain("1,340 nodes drawn as 70 groups of up to 23 positions");
    expect(text).toContain("zoom in or keep fewer edges");
  });

  it("says all are drawn when they are, and that drawing is under way while it is", () => {
    expect(lodText({ ...base, kept: 5000 })).toBe("Level of detail: showing all 5,000 edges in view; 5,000 kept of 50,000.");
    expect(lodText({ ...base, drawn: 100, drawing: true })).toMatch(/^Level of detail: drawing 100 of 5,000 edges in view…/);
  });
});
