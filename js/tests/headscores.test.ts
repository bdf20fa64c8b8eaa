// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { barTicks, cellSize, headLabel, layerLabel, scoreIndex, scoreScale, valueDigits } from "../src/lib/headscores";
import type { HeadScoresTraits } from "../src/views/headscores";
import { nextFrame, viewsCleanedAfterEach, wire } from "./weightspace-fixtures";

function headState(extra: Partial<HeadScoresTraits> = {}): HeadScoresTraits {
  // two maps of 2 layers × 3 heads: a sequential one and a signed one
  const data = new Float64Array([0.1, 0.9, 0.2, 0.3, 0.4, 0.5, -1.5, 0.5, 0, 1, -0.25, 0.75]);
  return {
    _view: "headscores",
    model_name: "toy",
    scores: wire(data, [2, 2, 3]),
    names: ["induction score", "<b>DLA</b>"],
    notes: ["mean attention to the token after an earlier copy", ""],
    layer_labels: [],
    head_labels: [],
    scale: "auto",
    selected_map: 0,
    selected_layer: 0,
    selected_head: 1,
    ...extra,
  };
}

const view = viewsCleanedAfterEach(headState);

describe("head score scales", () => {
  it("is sequential from 0 for non-negative scores and symmetric about 0 for signed ones", () => {
    expect(scoreScale([0.2, 0.9, 0.5], "auto")).toEqual({ kind: "sequential", lo: 0, hi: 0.9 });
    expect(scoreScale([-1.5, 0.5], "auto")).toEqual({ kind: "diverging", lo: -1.5, hi: 1.5 });
    expect(scoreScale([0.2, 0.9], "diverging")).toEqual({ kind: "diverging", lo: -0.9, hi: 0.9 });
    expect(scoreScale([-1, 2], "sequential")).toEqual({ kind: "sequential", lo: -1, hi: 2 });
    expect(scoreScale([], "auto")).toEqual({ kind: "sequential", lo: 0, hi: 1 });
    expect(scoreScale([0, 0], "auto")).toEqual({ kind: "sequential", lo: 0, hi: 1 });
    expect(scoreScale([Number.NaN, 3], "auto").hi).toBe(3);
  });

  it("maps values to colours: zero is white's middle on a diverging scale, ends are clamped", () => {
    const d = scoreScale([-2, 2], "auto");
    expect(scoreIndex(0, d)).toBe(128);
    expect(scoreIndex(-2, d)).toBe(0);
    expect(scoreIndex(5, d)).toBe(255);
    const s = scoreScale([0, 4], "auto");
    expect(scoreIndex(0, s)).toBe(0);
    expect(scoreIndex(4, s)).toBe(255);
    expect(scoreIndex(2, s)).toBe(128);
  });

  it("labels the colour bar with round numbers inside the scale", () => {
    const t = barTicks({ kind: "sequential", lo: 0, hi: 0.9 });
    expect(t.values).toEqual([0, 0.2, 0.4, 0.6, 0.8]);
    expect(t.digits).toBe(1);
    expect(barTicks({ kind: "diverging", lo: -1.5, hi: 1.5 }).values).toEqual([-1, 0, 1]);
    expect(valueDigits({ kind: "sequential", lo: 0, hi: 1 })).toBe(2);
    expect(valueDigits({ kind: "sequential", lo: 0, hi: 0.004 })).toBe(4);
  });

  it("names rows and columns, by default as the paper does", () => {
    expect(layerLabel([], 2)).toBe("L2");
    expect(headLabel([], 5)).toBe("H5");
    expect(layerLabel(["embed", "attn"], 1)).toBe("attn");
    expect(cellSize(300, 3)).toBe(46);
    expect(cellSize(300, 100)).toBe(14);
  });
});

describe("head scores view", () => {
  it("draws one cell per head, a colour bar with numbers, and the selected head in words", () => {
    const { el } = view();
    expect(el.dataset.cwView).toBe("headscores");
    expect(el.querySelectorAll("[data-cw-layer][data-cw-head]")).toHaveLength(6);
    const ticks = Array.from(el.querySelectorAll(".cw-colourbar text"), (t) => t.textContent);
    expect(ticks).toEqual(["0.0", "0.2", "0.4", "0.6", "0.8"]);
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L0H1: induction score 0\.90 selected/);
    expect(el.querySelector(".cw-selected")).not.toBeNull();
    expect(el.textContent).toContain("mean attention to the token after an earlier copy");
  });

  it("clicking a cell selects its head; hovering says its value", async () => {
    const { m, el } = view();
    const cell = el.querySelector("[data-cw-layer='1'][data-cw-head='2'] rect")!;
    cell.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("L1H2: induction score 0.50");
    cell.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 1, selected_head: 2 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("L1H2: induction score 0.50 (selected)");
  });

  it("switches maps; a signed map gets a diverging scale; names stay text", async () => {
    const { m, el } = view();
    const buttons = Array.from(el.querySelectorAll<HTMLButtonElement>(".cw-segmented button"));
    expect(buttons.map((b) => b.textContent)).toEqual(["induction score", "<b>DLA</b>"]);
    expect(el.querySelector("b")).toBeNull();
    buttons[1]!.click();
    expect(m.saves).toEqual([{ selected_map: 1 }]);
    await nextFrame();
    const ticks = Array.from(el.querySelectorAll(".cw-colourbar text"), (t) => t.textContent);
    expect(ticks).toEqual(["\u22121.0", "0.0", "1.0"]);
    expect(el.textContent).toContain("diverging scale, white at 0");
  });

  it("follows a selection made elsewhere and shows custom labels", async () => {
    const { m, el } = view({ layer_labels: ["first", "second"], head_labels: ["a", "b", "c"] });
    m.fromKernel({ selected_layer: 1, selected_head: 0 });
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L1H0 \(second, a\): induction score 0\.30 selected/);
  });
});
