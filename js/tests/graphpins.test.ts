// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { drawnId, groupPins, influenceRadius, parsePinned, parseSupernodes, scaleByInfluence, subgraph, togglePin, ungroup, ungroupedPins } from "../src/lib/graphpins";
import { layoutGraph, shortLabel } from "../src/lib/graphview";
import { card, nodeContexts } from "../src/views/graph/card";

describe("pins and supernodes", () => {
  it("pins, unpins (leaving its group, dropping an emptied group), groups the free pins and ungroups", () => {
    let state = togglePin([], [], 3);
    state = togglePin(state.pinned, state.supernodes, 5);
    expect(state.pinned).toEqual([3, 5]);
    const grouped = groupPins(state.pinned, state.supernodes, "  induction  ");
    expect(grouped).toEqual([{ label: "induction", nodes: [3, 5] }]);
    expect(groupPins(state.pinned, grouped ?? [], "again")).toBeNull(); // (every pin already grouped)
    expect(groupPins([7], [], "   ")).toBeNull(); // (no label)
    const more = togglePin(state.pinned, grouped ?? [], 7);
    expect(ungroupedPins(more.pinned, more.supernodes)).toEqual([7]);
    const out = togglePin(more.pinned, more.supernodes, 3);
    expect(out.pinned).toEqual([5, 7]);
    expect(out.supernodes).toEqual([{ label: "induction", nodes: [5] }]);
    expect(togglePin(out.pinned, out.supernodes, 5).supernodes).toEqual([]);
    expect(ungroup([{ label: "a", nodes: [1] }, { label: "b", nodes: [2] }], 0)).toEqual([{ label: "b", nodes: [2] }]);
  });

  it("reads the traits defensively", () => {
    expect(parsePinned([1, "2", 3.5, 4])).toEqual([1, 4]);
    expect(parsePinned(null)).toEqual([]);
    expect(parseSupernodes([{ label: "x", nodes: [1, "y"] }, { nodes: [2] }, 5, null])).toEqual([{ label: "x", nodes: [1] }]);
  });

  it("merges a supernode's edges into one summed edge and drops edges inside it", () => {
    // 0 → 1, 0 → 2, 1 → 3, 2 → 3, 1 → 2 (inside the group {1, 2}), 0 → 4 (4 not pinned)
    const src = [0, 0, 1, 2, 1, 0];
    const dst = [1, 2, 3, 3, 2, 4];
    const w = [1, 2, -0.5, 4, 9, 7];
    const groups = [{ label: "g", nodes: [1, 2] }];
    const sub = subgraph([0, 3], groups, src, dst, w);
    expect(sub.nodes).toEqual([0, 3]);
    const byKey = Object.fromEntries(sub.edges.map((e) => [`${e.from}|${e.to}`, e.weight]));
    expect(byKey).toEqual({ "n0|g0": 3, "g0|n3": 3.5 });
    expect(drawnId(groups, 2)).toBe("g0");
    expect(drawnId(groups, 3)).toBe("n3");
  });

  it("sizes nodes by influence, ports and nodes without influence unchanged", () => {
    expect(influenceRadius(10, 1, 1)).toBeCloseTo(10);
    expect(influenceRadius(10, 0, 1)).toBeCloseTo(4.5);
    expect(influenceRadius(10, Number.NaN, 1)).toBe(10);
    const placed = [{ r: 10 }, { r: 10 }, { r: 0 }];
    scaleByInfluence(placed, [0.25, 1, 1]);
    expect(placed.map((p) => p.r)).toEqual([10 * (0.45 + 0.55 * 0.5), 10, 0]);
  });

  it("stacks a crowded cell in lines inside its row and labels only logits per position", () => {
    const n = 12;
    const nodes = { kind: [...Array(10).fill("feature"), "embedding", "logit"], layer: [...Array(10).fill(0), -1, 1], pos: [...Array(10).fill(1), 0, 1], index: Array(n).fill(0) };
    const layout = layoutGraph(nodes, 400, ["a", "b"]);
    const ys = new Set(layout.nodes.slice(0, 10).map((p) => Math.round(p.y)));
    expect(ys.size).toBeGreaterThan(1);
    const points = layout.nodes.slice(0, 10).map((p) => `${Math.round(p.x)},${Math.round(p.y)}`);
    expect(new Set(points).size).toBe(10); // (no two features on the same spot)
    expect(shortLabel("logit", "logit ' the' (5)", 5, true)).toBe(" the");
    expect(shortLabel("feature", "L0 f1 @1", 1, true)).toBe("");
    expect(shortLabel("head", "L0H1", 1, false)).toBe("H1");
  });
});

describe("the hover card", () => {
  const ctx = {
    vocab: ["a", "\u202etxt.exe", "<b>"],
    tokens: { data: new Uint16Array([0, 1, 2, 3, 3, 3, 2, 2, 2, 3, 3, 3]), dtype: "uint16" as const, shape: [2, 2, 3] },
    value: { data: new Float32Array([1.5, Number.NaN, 0.5, 0.25]), dtype: "float32" as const, shape: [2, 2] },
    centre: 1,
  };

  it("reads a node's contexts until the first missing one", () => {
    expect(nodeContexts(ctx, 0)).toEqual([[1.5, ["a", "\u202etxt.exe", "<b>"]]]);
    expect(nodeContexts(ctx, 1)).toEqual([
      [0.5, ["<b>", "<b>", "<b>"]],
      [0.25, ["", "", ""]],
    ]);
    expect(nodeContexts(ctx, 5)).toEqual([]);
  });

  it("draws tokens as text, escaped, with the centre marked", () => {
    const box = card(document, { label: "L1 f3 @2", kind: "feature", activation: 2, influence: 0.1 }, 0, ctx);
    expect(box.querySelectorAll("[data-cw-context]")).toHaveLength(1);
    expect(box.querySelector("b")).toBeNull();
    expect(box.textContent).toContain("<b>");
    expect(box.textContent).not.toContain("\u202e");
    expect(box.querySelector(".cw-graph-ctx-centre")?.textContent).toContain("txt.exe");
  });
});
