import { describe, expect, it } from "vitest";
import { componentOf, curveValueAt, curveX, edgeColour, edgePath, edgeWidth, keptEdges, layoutGraph, type GraphNodes } from "../src/lib/graphview";

// a 1-layer, 2-head component graph: embed, H0, H1, their q/k/v inputs, MLP0, logits
function components(): GraphNodes {
  const kind = ["embedding", "head", "head", "head_q", "head_q", "head_k", "head_k", "head_v", "head_v", "mlp", "logit"];
  return {
    kind,
    layer: [-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    pos: kind.map(() => -1),
    index: [-1, 0, 1, 0, 1, 0, 1, 0, 1, -1, -1],
  };
}

describe("graph pruning in the view", () => {
  it("maps a head's inputs to the head", () => {
    expect(Array.from(componentOf(components()))).toEqual([0, 1, 2, 1, 2, 1, 2, 1, 2, 9, 10]);
  });

  it("keeps only edges on a path from the input to the logits, through a head's inputs", () => {
    const nodes = components();
    // strongest first: embed→H0.k, H1→logits (H1 has no kept input yet), H0→logits, embed→H1.v
    const src = [0, 2, 1, 0];
    const dst = [5, 10, 10, 8];
    expect(keptEdges(nodes, src, dst, 1)).toEqual([false]);
    expect(keptEdges(nodes, src, dst, 2)).toEqual([false, false]);
    expect(keptEdges(nodes, src, dst, 3)).toEqual([true, false, true]);
    expect(keptEdges(nodes, src, dst, 4)).toEqual([true, true, true, true]);
    expect(keptEdges(nodes, src, dst, 99)).toHaveLength(4);
    expect(keptEdges(nodes, src, dst, 0)).toEqual([]);
  });
});

describe("graph layout", () => {
  it("puts layers in rows (embeddings at the bottom, logits on top) and heads in columns, the MLP after them", () => {
    const layout = layoutGraph(components(), 600);
    const [embed, h0, h1] = layout.nodes;
    const mlp = layout.nodes[9];
    const logits = layout.nodes[10];
    expect(logits!.y).toBeLessThan(h0!.y);
    expect(h0!.y).toBeLessThan(embed!.y);
    expect(h0!.y).toBe(h1!.y);
    expect(h0!.x).toBeLessThan(h1!.x);
    expect(h1!.x).toBeLessThan(mlp!.x);
    expect(layout.columns.map((c) => c.label)).toEqual(["H0", "H1", "MLP"]);
    expect(layout.rows.map((r) => r.layer)).toEqual([-1, 0, 1]);
  });

  it("draws a head's q, k, v inputs as ports under it, left to right", () => {
    const layout = layoutGraph(components(), 600);
    const h0 = layout.nodes[1]!;
    const [q, k, v] = [layout.nodes[3]!, layout.nodes[5]!, layout.nodes[7]!];
    expect(q.r).toBe(0);
    expect(q.x).toBeLessThan(k.x);
    expect(k.x).toBe(h0.x);
    expect(k.x).toBeLessThan(v.x);
    expect(q.y).toBeGreaterThan(h0.y);
  });

  it("places per-position nodes by position, and spreads nodes sharing a cell", () => {
    const nodes: GraphNodes = { kind: ["embedding", "feature", "feature", "logit"], layer: [-1, 0, 0, 1], pos: [0, 1, 1, 1], index: [5, 3, 9, 7] };
    const layout = layoutGraph(nodes, 400, ["a", "b"]);
    const [e, f1, f2] = layout.nodes;
    expect(e!.x).toBeLessThan(f1!.x);
    expect(f1!.x).not.toBe(f2!.x);
    expect(f1!.y).toBe(f2!.y);
    expect(layout.columns.map((c) => c.label)).toEqual(["a", "b"]);
  });
});

describe("edge style and the faithfulness curve", () => {
  it("widens edges by |weight| and colours them by sign", () => {
    expect(edgeWidth(0, 2)).toBeCloseTo(0.6);
    expect(edgeWidth(-2, 2)).toBeCloseTo(6);
    expect(edgeWidth(1, 0)).toBe(0.6);
    expect(edgeColour(-1)).not.toBe(edgeColour(1));
  });

  it("paths leave the sender's top and enter the receiver", () => {
    expect(edgePath({ x: 10, y: 100, r: 5 }, { x: 50, y: 20, r: 0 })).toMatch(/^M10\.0,95\.0 C.* 50\.0,20\.0$/);
  });

  it("puts sizes on a log axis and reads measured values only", () => {
    expect(curveX(1, 1000, 0, 300)).toBe(0);
    expect(curveX(1000, 1000, 0, 300)).toBeCloseTo(300);
    expect(curveX(10, 100, 0, 200)).toBeCloseTo(100);
    expect(curveValueAt([0, 5, 50], [0, 0.4, 0.9], 5)).toBe(0.4);
    expect(curveValueAt([0, 5, 50], [0, 0.4, 0.9], 6)).toBeNull();
  });
});
