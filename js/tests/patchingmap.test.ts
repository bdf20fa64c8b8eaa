// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { axisLabel, cellName, cellValue, clickPatch, patchScale, selectedColumn, shownPanel } from "../src/lib/patchingmap";
import { LinkGroup, OfflineModel, parseAliases } from "../src/shim/offline";
import type { PatchingMapTraits } from "../src/views/patchingmap";
import { nextFrame, viewsCleanedAfterEach, wire } from "./weightspace-fixtures";

function mapState(extra: Partial<PatchingMapTraits> = {}): PatchingMapTraits {
  // 2 heads (panels) × 2 layers × 3 positions; NaN: a cell that does not exist
  const data = new Float64Array([0, 0.5, 1, Number.NaN, -0.2, 0.1, 0.3, 0.2, 0.1, 0, 0, 0.9]);
  return {
    _view: "patchingmap",
    values: wire(data, [2, 2, 3]),
    col_dim: "pos",
    panel_dim: "head",
    layer_labels: ["L0", "L1"],
    col_labels: ["0 'a'", "1 ' b'", "2 '<i>c</i>'"],
    panel_labels: ["H0", "H1"],
    clean_tokens: ["<s>", " cat", "<i>c</i>"],
    corrupted_tokens: ["<s>", " dog", "<i>c</i>"],
    differ: [1],
    normalised: true,
    title: "activation patching of z",
    metric: "normalised logit_diff(pos=-1)",
    caption: "activation patching on 'toy'; site 'z'",
    scale_note: "0 = corrupted behaviour, 1 = clean behaviour restored",
    model_name: "toy",
    selected_layer: 0,
    selected_head: 0,
    selected_pos: 2,
    selected_panel: 0,
    ...extra,
  };
}

const view = viewsCleanedAfterEach(mapState);

describe("patching map pieces", () => {
  it("scales around 0, and a normalised metric from 0 to at least 1", () => {
    expect(patchScale([-0.5, 2, Number.NaN], false)).toEqual({ kind: "diverging", lo: -2, hi: 2 });
    expect(patchScale([0.1, 0.4], true)).toEqual({ kind: "diverging", lo: 0, hi: 1 });
    expect(patchScale([-0.2, 1.3], true)).toEqual({ kind: "diverging", lo: -0.2, hi: 1.3 });
    expect(patchScale([], false)).toEqual({ kind: "diverging", lo: -1, hi: 1 });
  });

  it("labels positions with tokens as visible text, the corrupted token where they differ", () => {
    const differ = new Set([1]);
    expect(axisLabel("pos", [], [" cat", " the\n"], [" dog", " the\n"], new Set([0]), 1)).toEqual({ text: "·the⏎", title: null, differs: false });
    expect(axisLabel("pos", [], [" the", " cat"], [" the", " dog"], differ, 1)).toMatchObject({ text: "·cat→·dog", differs: true, title: "·cat → ·dog" });
    expect(axisLabel("head", ["H0", "H1"], [], [], differ, 1).text).toBe("H1");
    expect(cellName("pos", [], ["a", " cat"], ["a", " dog"], differ, "L1", 1)).toBe("L1 · pos 1 '·cat' (corrupted '·dog')");
    expect(cellName("head", ["H0", "H3"], [], [], differ, "L1", 1)).toBe("L1H3");
    expect(cellValue(Number.NaN, 2)).toBe("n/a");
    expect(cellValue(-0.5, 2)).toBe("\u22120.50");
  });

  it("says what a click selects and which panel and column are shown", () => {
    expect(clickPatch("pos", "head", 1, 2, 3)).toEqual({ selected_layer: 1, selected_panel: 3, selected_pos: 2, selected_head: 3 });
    expect(clickPatch("head", "", 0, 5, 0)).toEqual({ selected_layer: 0, selected_panel: 0, selected_head: 5 });
    expect(clickPatch("neuron", "", 1, 7, 0)).toEqual({ selected_layer: 1, selected_panel: 0 });
    expect(shownPanel("head", 1, 0, 2)).toBe(1);
    expect(shownPanel("sender", 1, 5, 2)).toBe(0);
    expect(selectedColumn("pos", 4, 2, 3)).toBe(2);
    expect(selectedColumn("head", -1, 2, 3)).toBe(-1);
  });
});

describe("patching map view", () => {
  it("draws the selected head's panel, 'n/a' for NaN, tokens as text, and its caption", () => {
    const { el } = view({ selected_head: 0 });
    expect(el.dataset.cwView).toBe("patchingmap");
    expect(el.querySelectorAll("[data-cw-layer][data-cw-col]")).toHaveLength(6);
    expect(el.querySelector("[data-cw-layer='1'][data-cw-col='0']")?.getAttribute("data-cw-value")).toBe("n/a");
    expect(el.querySelector("i")).toBeNull();
    const axis = Array.from(el.querySelectorAll("[data-cw-axis]"), (t) => t.textContent);
    expect(axis).toEqual(["<s>", "·cat→·dog", "<i>c</i>"]);
    expect(el.querySelectorAll(".cw-differ")).toHaveLength(1);
    expect(el.querySelector(".cw-caption")?.textContent).toContain("1 = clean behaviour restored");
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L0 · pos 2 '<i>c<\/i>' \[H0\]: 1\.00 selected/);
  });

  it("a click selects layer, position and the shown head; hover says the value; the picker changes head", async () => {
    const { m, el } = view();
    const cell = el.querySelector("[data-cw-layer='1'][data-cw-col='1'] rect")!;
    cell.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("L1 · pos 1 '·cat' (corrupted '·dog') [H0]: \u22120.20");
    cell.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 1, selected_pos: 1 }]); // (the shown head is selected already)
    const picker = el.querySelector<HTMLSelectElement>("[data-cw-panel-picker]")!;
    picker.value = "1";
    picker.dispatchEvent(new Event("change"));
    await nextFrame();
    expect(m.saves.at(-1)).toEqual({ selected_head: 1, selected_panel: 1 });
    expect(el.querySelector("[data-cw-layer='1'][data-cw-col='2']")?.getAttribute("data-cw-value")).toBe("0.9");
  });
});

describe("patching map layout", () => {
  it("redraws at its width once laid out (JupyterLab draws a view before attaching it), and only when the width changes", async () => {
    const win = document.defaultView as unknown as { ResizeObserver?: unknown };
    const saved = win.ResizeObserver;
    const observers: { callback: () => void; observed: Element[]; disconnected: boolean }[] = [];
    win.ResizeObserver = class {
      entry: (typeof observers)[number];
      constructor(callback: () => void) {
        this.entry = { callback, observed: [], disconnected: false };
        observers.push(this.entry);
      }
      observe(target: Element): void {
        this.entry.observed.push(target);
      }
      disconnect(): void {
        this.entry.disconnected = true;
      }
    };
    try {
      const heads = Array.from({ length: 30 }, (_, i) => `H${i}`);
      const { el, cleanup } = view({ values: wire(new Float64Array(30).fill(0.5), [1, 1, 30]), col_dim: "head", panel_dim: "", layer_labels: ["L0"], col_labels: heads, panel_labels: [], clean_tokens: [], corrupted_tokens: [], differ: [], selected_pos: -1 });
      const cellWidth = () => Number(el.querySelector("[data-cw-layer='0'][data-cw-col='0'] rect")?.getAttribute("width"));
      const before = cellWidth(); // (no width yet: drawn at the fallback width)
      const observer = observers.find((o) => o.observed.includes(el));
      expect(observer).toBeDefined();
      Object.defineProperty(el, "clientWidth", { configurable: true, value: 1400 });
      observer!.callback();
      await nextFrame();
      expect(cellWidth()).toBeGreaterThan(before);
      const svg = el.querySelector("svg");
      observer!.callback(); // the same width: nothing redrawn
      await nextFrame();
      expect(el.querySelector("svg")).toBe(svg);
      cleanup();
      expect(observer!.disconnected).toBe(true);
    } finally {
      win.ResizeObserver = saved;
    }
  });
});

describe("offline link groups", () => {
  it("links a map's position as the attention view's destination, and a map with no heads by position only", () => {
    expect(parseAliases("selected_dest=selected_pos")).toEqual({ selected_dest: "selected_pos" });
    const map = new OfflineModel({ selected_layer: 0, selected_head: 0, selected_pos: -1 });
    const positions = new OfflineModel({ selected_layer: 0, selected_head: -1, selected_pos: -1 });
    const attention = new OfflineModel({ selected_layer: 0, selected_head: 0, selected_dest: -1 });
    const group = new LinkGroup(["selected_layer", "selected_head", "selected_dest"]);
    group.add(map, group.names, { selected_dest: "selected_pos" });
    group.add(positions, ["selected_dest"], { selected_dest: "selected_pos" });
    group.add(attention);
    map.set("selected_head", 5);
    map.set("selected_pos", 7);
    expect([attention.get("selected_head"), attention.get("selected_dest"), positions.get("selected_pos")]).toEqual([5, 7, 7]);
    positions.set("selected_layer", 1); // not linked: its layer is not a head's
    expect(attention.get("selected_layer")).toBe(0);
    attention.set("selected_dest", 2);
    expect([map.get("selected_pos"), positions.get("selected_pos")]).toEqual([2, 2]);
  });
});
