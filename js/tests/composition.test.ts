// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { decodeArray } from "../src/lib/arrays";
import { colourLimit, heatmapCells, toCompData } from "../src/lib/composition";
import { compositionState, H, nextFrame, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(compositionState);

describe("composition logic", () => {
  it("maps earlier heads to rows and later heads to columns, empty where undefined", () => {
    const s = compositionState();
    const d = toCompData(decodeArray(s.scores), s.baseline_value);
    const limit = colourLimit(d, true);
    expect(limit).toBeCloseTo(0.3 + 0.08 - 0.15, 5);
    const cells = heatmapCells(d, 0, true, limit);
    expect(cells.rows).toBe(H);
    expect(cells.cols).toBe(H);
    expect(cells.index(0, 0)).toBeLessThan(128); // 0.1 − 0.15 < 0: blue side
    expect(heatmapCells(d, 2, true, limit).index(2, 2)).toBe(255);
  });
});

describe("composition view", () => {
  it("draws the strongest edges and a node per head", () => {
    const { el } = view();
    expect(el.dataset.cwView).toBe("composition");
    expect(el.querySelectorAll("[data-cw-edge]")).toHaveLength(6);
    expect(el.querySelectorAll("[data-cw-head]")).toHaveLength(2 * H);
    expect(el.querySelector("[data-cw-edge]")?.getAttribute("data-cw-kind")).toBe("V");
  });

  it("draws only edges that clear the kernel's threshold and its legend says how many and what it is", () => {
    // V minus the baseline is 0.15 + 0.01 (3 h1 + h2): four pairs reach 0.195 (0.345 raw)
    const { el } = view({ edge_threshold: 0.345, threshold_label: "the test's threshold", n_edges: 3 });
    const edges = [...el.querySelectorAll("[data-cw-edge]")];
    expect(edges).toHaveLength(3);
    expect(edges.every((e) => e.getAttribute("data-cw-kind") === "V")).toBe(true);
    const legend = el.querySelector(".cw-map-legend .cw-edge-threshold")?.textContent ?? "";
    expect(legend).toBe("Graph: the top 3 of the 4 edges scoring at least 0.195 above baseline (threshold: the test's threshold).");
    expect(el.querySelector(".cw-map-legend .cw-edge-widths")?.textContent).toMatch(/^Width and shade:0\.210.*0\.230 above baseline$/);
    expect(el.querySelector(".cw-map-legend .cw-keys")?.textContent).toMatch(/K-composition/);
  });

  it("says when no threshold is set", () => {
    const { el } = view();
    // above the 0.15 baseline: the 9 V and 9 K pairs, and Q's 0.1 + 0.01 i for i = 5..8 (float32 0.15 sits a hair above it)
    expect(el.querySelector(".cw-edge-threshold")?.textContent).toBe("Graph: the top 6 of the 22 edges above the random baseline (no threshold).");
  });

  it("clicking an edge selects both heads", async () => {
    const { m, el } = view();
    const edge = el.querySelector("[data-cw-edge='0.2-1.2'][data-cw-kind='V']") as Element;
    edge.querySelector("path")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_edge: [0, 2, 1, 2], edge_kind: "V", selected_layer: 1, selected_head: 2 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^Edge L0H2 → L1H2 \(V, 0\.230 above baseline\) selected; L1H2 selected/);
  });

  it("filters edges by kind and toggles the baseline", async () => {
    const { m, el } = view();
    [...el.querySelectorAll<HTMLButtonElement>(".cw-segmented button")].find((b) => b.dataset.value === "Q")!.click();
    await nextFrame();
    expect(m.get("kind")).toBe("Q");
    const kinds = new Set([...el.querySelectorAll("[data-cw-edge]")].map((e) => e.getAttribute("data-cw-kind")));
    expect([...kinds]).toEqual(["Q"]);
    const box = el.querySelector("input[type='checkbox']") as HTMLInputElement;
    box.checked = false;
    box.dispatchEvent(new Event("change"));
    expect(m.get("subtract_baseline")).toBe(false);
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-edge]")).toHaveLength(6);
    expect(el.querySelector(".cw-note")?.textContent).toMatch(/raw/);
  });

  it("clicking a head node selects it", () => {
    const { m, el } = view();
    el.querySelector("[data-cw-head='1.1'] circle")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 1, selected_head: 1 }]);
  });
});
