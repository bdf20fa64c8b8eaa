// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { decodeArray } from "../src/lib/arrays";
import { toCompData } from "../src/lib/composition";
import { allEdges, edgePoints, polylineDistance, strongestEdges } from "../src/lib/graph";
import { compactLayout, fitsFull, fullLayout, graphLayout } from "../src/lib/graphlayout";
import { headAxis, labelStep, spaceLabels } from "../src/lib/heataxis";
import { BIG_H, BIG_L, bigCompositionState } from "./scale-fixtures";
import { nextFrame, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(bigCompositionState);
const width = (text: string) => text.length * 6;
const overlapping = (marks: { from: number; to: number }[]) => marks.some((m, i) => i > 0 && m.from < (marks[i - 1] as { to: number }).to);

describe("axes of a map of heads grouped by layer", () => {
  it("shade every layer in view and name every k-th one, never two names overlapping", () => {
    // 31 layers of 32 heads (992 cells) in 300 px: ~9.7 px a layer
    const axis = headAxis(0, 31 * 32, 300, 32, 1, width, width);
    expect(axis.bands).toHaveLength(31);
    expect(axis.bands[0]).toMatchObject({ layer: 1, from: 0 });
    expect(axis.layerStep).toBe(4); // "L31" needs 22 px: every 4th layer (38.7 px apart)
    expect(axis.layerMarks.map((m) => m.text)).toEqual(["L4", "L8", "L12", "L16", "L20", "L24", "L28"]);
    expect(overlapping(axis.layerMarks)).toBe(false);
    expect(axis.headMarks).toHaveLength(0); // heads at 0.3 px are named by their layer only
    for (const m of axis.layerMarks) expect(m.from >= 0 && m.to <= 300).toBe(true);
  });

  it("number heads once cells are wide enough: every k-th, then every head", () => {
    const some = headAxis(64, 64, 300, 32, 0, width, width); // 4.7 px a cell
    expect(some.headStep).toBe(4);
    expect(some.headMarks.map((m) => m.text).slice(0, 3)).toEqual(["0", "4", "8"]);
    expect(overlapping(some.headMarks)).toBe(false);
    expect(some.layerMarks.map((m) => m.text)).toEqual(["L2", "L3"]);
    const all = headAxis(40, 16, 300, 32, 0, width, width); // 18.75 px a cell
    expect(all.headStep).toBe(1);
    expect(all.headMarks.map((m) => m.text)).toEqual(Array.from({ length: 16 }, (_, i) => String((40 + i) % 32)));
    expect(all.layerMarks.map((m) => m.text)).toEqual(["L1"]); // the one layer in view (heads 8–23 of layer 1)
  });

  it("move labels inside the axis and drop those that would overlap", () => {
    expect(labelStep(10, 22)).toBe(4);
    expect(labelStep(0, 22)).toBe(Number.POSITIVE_INFINITY);
    const marks = spaceLabels([{ text: "a", at: 1, size: 10 }, { text: "b", at: 6, size: 10 }, { text: "c", at: 99, size: 10 }], 100);
    expect(marks.map((m) => [m.text, m.from, m.to])).toEqual([["a", 0, 10], ["c", 90, 100]]);
  });
});

describe("the strongest edges of a 32 × 32 model", () => {
  it("equal the first n of the full sorted list", () => {
    const d = toCompData(decodeArray(bigCompositionState({}, 4, 6).scores), 0.12);
    for (const n of [1, 12, 48]) expect(strongestEdges(d, ["Q", "K", "V"], n, true)).toEqual(allEdges(d, ["Q", "K", "V"], true).filter((e) => e.value > 0).slice(0, n));
    expect(strongestEdges(d, ["K"], 5, false)).toEqual(allEdges(d, ["K"], false).slice(0, 5));
    expect(strongestEdges(d, ["K"], 0, false)).toEqual([]);
  });

  it("are found among 1.5 million without listing them all", () => {
    const d = toCompData(decodeArray(bigCompositionState().scores), 0.12);
    const top = strongestEdges(d, ["Q", "K", "V"], 12, true);
    expect(top).toHaveLength(12);
    expect(top[0]).toMatchObject({ kind: "K", l1: 5, h1: 4, l2: 9, h2: 2 });
    expect(top[1]).toMatchObject({ kind: "V", l1: 0, h1: 0, l2: 31, h2: 31 });
  });
});

describe("graph layout", () => {
  const circlesApart = (nodes: { x: number; y: number }[], r: number) => nodes.every((a, i) => nodes.slice(i + 1).every((b) => Math.hypot(a.x - b.x, a.y - b.y) >= 2 * r + 2));

  it("draws every head of a small model and keeps the circles apart", () => {
    expect(fitsFull(2, 12)).toBe(true);
    expect(fitsFull(32, 32)).toBe(false);
    expect(fitsFull(12, 12)).toBe(false); // GPT-2 small: 12 columns would crowd
    const full = fullLayout(2, 12);
    expect(full.nodes).toHaveLength(24);
    expect(full.complete).toBe(true);
    expect(circlesApart(full.nodes, full.radius)).toBe(true);
  });

  it("draws only the heads the edges join at 32 × 32, in layer columns far enough apart for their labels", () => {
    const edges = [
      { l1: 5, h1: 4, l2: 9, h2: 2 },
      { l1: 0, h1: 0, l2: 31, h2: 31 },
      { l1: 5, h1: 7, l2: 9, h2: 2 },
    ];
    const layout = graphLayout(32, 32, edges, { layer: 3, head: 1 });
    expect(layout.complete).toBe(false);
    expect(layout.nodes.map((n) => `${n.layer}.${n.head}`).sort()).toEqual(["0.0", "3.1", "31.31", "5.4", "5.7", "9.2"]);
    expect(layout.columns.map((c) => c.layer)).toEqual([0, 3, 5, 9, 31]);
    const xs = layout.columns.map((c) => c.x);
    for (let i = 1; i < xs.length; i++) expect((xs[i] as number) - (xs[i - 1] as number)).toBeGreaterThanOrEqual(42); // "L31" at 11.5 px is 22 px wide
    expect(circlesApart(layout.nodes, layout.radius)).toBe(true);
    expect(layout.node(31, 30)).toBeNull();
    for (const n of layout.nodes) expect(n.x + layout.radius <= layout.width && n.y + layout.radius <= layout.height).toBe(true);
  });

  it("routes no edge behind a head it does not join (the default 12 edges; at 48, few) within a bounded height", () => {
    const d = toCompData(decodeArray(bigCompositionState().scores), 0.12);
    for (const n of [12, 48]) {
      const edges = strongestEdges(d, ["Q", "K", "V"], n, true);
      const layout = graphLayout(32, 32, edges, { layer: 9, head: 2 });
      let passes = 0;
      for (const e of edges) {
        const a = layout.node(e.l1, e.h1)!;
        const b = layout.node(e.l2, e.h2)!;
        const curve = edgePoints(a, b, layout.radius, 0);
        for (const m of layout.nodes) {
          if ((m.layer === e.l1 && m.head === e.h1) || (m.layer === e.l2 && m.head === e.h2)) continue;
          if (polylineDistance(m, curve) < layout.radius + 1) passes++;
        }
      }
      // laid out naively (each column's heads top down), 12 edges pass behind 36 heads
      expect(passes).toBeLessThanOrEqual(n === 12 ? 0 : 6);
      expect(layout.height).toBeLessThan(n === 12 ? 400 : 1200);
      expect(circlesApart(layout.nodes, layout.radius)).toBe(true);
    }
  });

  it("keeps 200 edges' heads apart too", () => {
    const heads = Array.from({ length: 400 }, (_, i) => ({ layer: i % 32, head: (i * 7) % 32 }));
    const layout = compactLayout(heads);
    expect(circlesApart(layout.nodes, layout.radius)).toBe(true);
  });
});

describe("composition map of a 32 × 32-head model", () => {
  it("draws the strongest 12 edges and only their heads, and says how many heads it leaves out", () => {
    const { el } = view();
    expect(el.querySelectorAll("[data-cw-edge]")).toHaveLength(12);
    const heads = el.querySelectorAll(".cw-graph [data-cw-head]").length;
    expect(heads).toBeLessThanOrEqual(25);
    expect(el.querySelector(".cw-graph-note")?.textContent).toContain(`${BIG_L * BIG_H - heads} others are not`);
    const columns = [...el.querySelectorAll(".cw-graph-layer")].map((t) => t.textContent);
    expect(new Set(columns).size).toBe(columns.length);
  });

  it("offers the edge count and draws as many as chosen", async () => {
    const { m, el } = view();
    const select = el.querySelector<HTMLSelectElement>(".cw-controls select")!;
    expect([...select.options].map((o) => o.value)).toEqual(["6", "12", "24", "48", "96"]);
    select.value = "48";
    select.dispatchEvent(new Event("change"));
    expect(m.get("n_edges")).toBe(48);
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-edge]")).toHaveLength(48);
  });

  it("shows a count the kernel set that the menu does not offer", () => {
    const { el } = view({ n_edges: 30 });
    const select = el.querySelector<HTMLSelectElement>(".cw-controls select")!;
    expect(select.value).toBe("30");
    expect(el.querySelectorAll("[data-cw-edge]")).toHaveLength(30);
  });

  it("lays out the maps' axes with every 4th layer named and no label over another", () => {
    const { el } = view();
    const canvas = el.querySelector<HTMLCanvasElement>("canvas[data-kind='K']")!;
    expect(canvas.dataset.cwViewport).toBe(`0,0,${31 * 32}`);
    const labels = JSON.parse(canvas.dataset.cwAxisLabels ?? "[]") as { text: string; x: number; y: number; w: number; h: number }[];
    expect(labels.map((l) => l.text)).toContain("L4");
    for (const [i, a] of labels.entries())
      for (const b of labels.slice(i + 1)) expect(a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h).toBe(false);
  });

  it("zooms with its buttons, names heads once cells widen, and goes back to the whole map", async () => {
    const { el } = view();
    const button = (text: string) => [...el.querySelectorAll<HTMLButtonElement>(".cw-zoom-bar button")].find((b) => b.textContent === text)!;
    expect(button("Whole map").disabled).toBe(true);
    for (let i = 0; i < 5; i++) button("+").click(); // 992 → 31 cells a side
    const canvas = el.querySelector<HTMLCanvasElement>("canvas[data-kind='Q']")!;
    const [, , size] = (canvas.dataset.cwViewport ?? "").split(",").map(Number);
    expect(size).toBe(31);
    const texts = (JSON.parse(canvas.dataset.cwAxisLabels ?? "[]") as { text: string }[]).map((l) => l.text);
    expect(texts.filter((t) => /^\d+$/.test(t)).length).toBeGreaterThan(20); // head numbers
    expect(el.querySelector(".cw-map-window")?.textContent).toMatch(/^Zoomed: rows L\d+H\d+–L\d+H\d+, columns/);
    expect(canvas.dataset.cwValues).toBe("hidden");
    for (let i = 0; i < 2; i++) button("+").click(); // 8 cells a side: 37.5 px each, room for a value
    expect(canvas.dataset.cwViewport?.split(",")[2]).toBe("8");
    expect(canvas.dataset.cwValues).toBe("shown");
    expect(button("+").disabled).toBe(true);
    button("Whole map").click();
    expect(canvas.dataset.cwViewport).toBe(`0,0,${31 * 32}`);
    expect(el.querySelector(".cw-map-window")?.textContent).toBe("");
  });

  it("follows an edge selected elsewhere into view when zoomed", async () => {
    const { m, el } = view();
    const plus = [...el.querySelectorAll<HTMLButtonElement>(".cw-zoom-bar button")].find((b) => b.textContent === "+")!;
    for (let i = 0; i < 4; i++) plus.click(); // 62 cells a side, around the middle
    m.fromKernel({ selected_edge: [0, 0, 31, 31], edge_kind: "V", selected_layer: 31, selected_head: 31 });
    await nextFrame();
    const [r0, c0, size] = (el.querySelector<HTMLCanvasElement>("canvas[data-kind='V']")!.dataset.cwViewport ?? "").split(",").map(Number);
    expect(0 >= (r0 as number) && 0 < (r0 as number) + (size as number)).toBe(true);
    const col = 30 * 32 + 31;
    expect(col >= (c0 as number) && col < (c0 as number) + (size as number)).toBe(true);
  });
});
