import { describe, expect, it } from "vitest";
import { clip, keptByInfluence, NODE_R, overlappingPairs, PITCH_X, readableLayout, shownNodes, spineEdges } from "../src/lib/graphread";
import type { GraphNodes } from "../src/lib/graphview";

/** A random attribution graph: embeddings, features and errors on 2 layers, 3 logits; edges in influence order. */
function randomGraph(seed: number, nPos: number, crowd: number) {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const kind: string[] = [];
  const layer: number[] = [];
  const pos: number[] = [];
  for (let p = 0; p < nPos; p++) (kind.push("embedding"), layer.push(-1), pos.push(p));
  for (let l = 0; l < 2; l++)
    for (let p = 1; p < nPos; p++) {
      const k = Math.floor(rand() * crowd);
      for (let f = 0; f < k; f++) (kind.push("feature"), layer.push(l), pos.push(p));
      kind.push("error"), layer.push(l), pos.push(p);
    }
  for (let t = 0; t < 3; t++) (kind.push("logit"), layer.push(2), pos.push(nPos - 1));
  const n = kind.length;
  const src: number[] = [];
  const dst: number[] = [];
  for (let d = 0; d < n; d++) {
    if (kind[d] === "embedding" || kind[d] === "error") continue;
    for (let e = 0; e < 4; e++) {
      const candidates = [...Array(n).keys()].filter((i) => (layer[i] as number) < (layer[d] as number) && (pos[i] as number) <= (pos[d] as number) && kind[i] !== "logit");
      if (candidates.length) (src.push(candidates[Math.floor(rand() * candidates.length)] as number), dst.push(d));
    }
  }
  const nodes: GraphNodes = { kind, layer, pos, index: kind.map((_, i) => i) };
  const nodeShare = kind.map((k) => (k === "embedding" || k === "logit" ? 0 : rand()));
  const edgeShare = src.map((_, e) => e / src.length);
  return { nodes, src, dst, nodeShare, edgeShare };
}

describe("an attribution graph a reader can read", () => {
  it("never overlaps two nodes, however crowded a cell", () => {
    for (const [seed, nPos, crowd] of [
      [1, 12, 3],
      [2, 30, 12],
      [3, 64, 25],
      [4, 5, 40],
    ] as const) {
      const g = randomGraph(seed, nPos, crowd);
      const all = new Set(g.nodes.kind.map((_, i) => i));
      const layout = readableLayout(g.nodes, all, []);
      expect(overlappingPairs(layout.nodes)).toEqual([]);
      expect(layout.nodes.filter(Boolean).length).toBe(all.size);
      // each node in its own column (position) and its own row (layer)
      for (const i of all) {
        const p = layout.nodes[i];
        expect(p).toBeDefined();
        const rowY = layout.rows.find((r) => r.layer === g.nodes.layer[i])?.y as number;
        expect((p?.y as number) >= rowY - 1e-9).toBe(true);
      }
    }
  });

  it("detects an overlap when there is one (the check can fail)", () => {
    expect(overlappingPairs([{ x: 10, y: 10, r: NODE_R }, { x: 10 + PITCH_X / 2, y: 12, r: NODE_R }])).toEqual([[0, 1]]);
  });

  it("columns grow with their most crowded cell; empty columns stay narrow", () => {
    const nodes: GraphNodes = { kind: ["feature", "feature", "feature", "embedding"], layer: [0, 0, 0, -1], pos: [2, 2, 2, 0], index: [0, 1, 2, -1] };
    const layout = readableLayout(nodes, new Set([0, 1, 2, 3]), ["a", "b", "c"]);
    const [c0, c1, c2] = layout.columns.map((c) => c.x);
    expect((c2 as number) - (c1 as number)).toBeGreaterThan((c1 as number) - (c0 as number));
    expect(layout.columns.map((c) => c.label)).toEqual(["a", "b", "c"]);
  });

  it("keeps every logit reachable at any threshold, and prunes monotonically", () => {
    const g = randomGraph(7, 16, 6);
    let before = Number.POSITIVE_INFINITY;
    for (const t of [1, 0.8, 0.5, 0.2, 0.05, 0.001]) {
      const kept = keptByInfluence(g.nodes, g.src, g.dst, g.nodeShare, g.edgeShare, t, t);
      const count = kept.filter(Boolean).length;
      expect(count).toBeGreaterThan(0);
      expect(count).toBeLessThanOrEqual(before);
      before = count;
      const into = new Set(g.dst.filter((_, e) => kept[e]));
      g.nodes.kind.forEach((k, i) => k === "logit" && g.dst.includes(i) && expect(into.has(i)).toBe(true));
    }
  });

  it("the spine follows each logit's strongest incoming edge back to a source", () => {
    const kinds = ["embedding", "feature", "feature", "logit"];
    // edges in influence order: 2→3 strongest into the logit, then 1→3; into 2: 0→2
    const src = [2, 1, 0, 0];
    const dst = [3, 3, 2, 1];
    expect([...spineEdges(kinds, src, dst)].sort()).toEqual([0, 2]);
    expect([...shownNodes([true, false, false, false], src, dst, kinds, [1])].sort()).toEqual([1, 2, 3]);
  });

  it("clips labels as text", () => {
    expect(clip("<img src=x>", 5)).toBe("<img…");
    expect(clip("ab", 5)).toBe("ab");
  });
});
