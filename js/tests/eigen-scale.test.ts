// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { CATEGORICAL_LAYERS, layerPalette, layerRampIndex } from "../src/lib/colour";
import { parseHeadName, placeLabels, pointRadius } from "../src/lib/eigen";
import { BIG_H, BIG_L, bigEigenState } from "./scale-fixtures";
import { nextFrame, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(bigEigenState);

describe("a head found by its name", () => {
  it("reads the paper's L3H7 and the short forms people type", () => {
    for (const text of ["L3H7", "l3h7", " L3 H7 ", "3.7", "3,7", "3 7", "layer 3 head 7"]) expect(parseHeadName(text, 32, 32)).toEqual({ layer: 3, head: 7 });
  });

  it("says why a name is not a head of this model", () => {
    expect(parseHeadName("L32H0", 32, 32)).toEqual({ error: expect.stringMatching(/layers 0–31/) });
    expect(parseHeadName("L0H40", 32, 32)).toEqual({ error: expect.stringMatching(/heads 0–31/) });
    expect(parseHeadName("induction", 32, 32)).toEqual({ error: expect.stringMatching(/not a head name.*L3H7/) });
  });
});

describe("layer colours", () => {
  it("give each of up to eight layers its own categorical colour, and many layers distinct colours in order", () => {
    expect(new Set(Array.from({ length: CATEGORICAL_LAYERS }, (_, l) => layerPalette(8)(l))).size).toBe(8);
    const colour = layerPalette(32);
    const all = Array.from({ length: 32 }, (_, l) => colour(l));
    expect(new Set(all).size).toBe(32); // layer 0 and layer 8 no longer share a colour
    expect(colour(0)).not.toBe(colour(8));
    expect(layerRampIndex(0, 32)).toBe(0);
    expect(layerRampIndex(31, 32)).toBe(255);
    expect(layerRampIndex(0, 1)).toBe(0);
  });
});

describe("points and labels in a crowd", () => {
  it("shrink points as the plot fills", () => {
    expect(pointRadius(24)).toBeGreaterThan(pointRadius(100));
    expect(pointRadius(100)).toBeGreaterThan(pointRadius(1024));
  });

  it("find the selected head's label a spot clear of a crowd, farther out when its neighbours are dense", () => {
    // a 9 × 9 block of dots 8 px apart around the selected head, and open space beyond 40 px
    const dots = [];
    for (let i = -4; i <= 4; i++) for (let j = -4; j <= 4; j++) if (i || j) dots.push({ x: 200 + 8 * i, y: 200 + 8 * j, r: 5 });
    const ring = { x: 200, y: 200, r: 13 };
    const [box] = placeLabels([{ x: 200, y: 200, width: 40, height: 15, clear: 14, required: true }], [ring, ...dots], { x: 0, y: 0, width: 400, height: 400 });
    expect(box).not.toBeNull();
    const b = box as { x: number; y: number; width: number; height: number };
    for (const c of [ring, ...dots]) {
      const nx = Math.max(b.x, Math.min(c.x, b.x + b.width));
      const ny = Math.max(b.y, Math.min(c.y, b.y + b.height));
      expect((nx - c.x) ** 2 + (ny - c.y) ** 2).toBeGreaterThanOrEqual(c.r * c.r);
    }
  });
});

describe("eigen scatter of a 32 × 32-head model", () => {
  it("colours layers on a ramp with a colour bar numbered by layer instead of 32 swatches", () => {
    const { el } = view();
    expect(el.querySelectorAll("[data-cw-head]")).toHaveLength(BIG_L * BIG_H);
    expect(el.querySelectorAll(".cw-legend .cw-swatch")).toHaveLength(0);
    const ticks = [...el.querySelectorAll(".cw-legend .cw-colourbar-tick")].map((t) => t.textContent);
    expect(ticks[0]).toBe("0");
    expect(ticks.at(-1)).toBe("31");
    const fill = (head: string) => el.querySelector(`[data-cw-head="${head}"] .cw-mark`)?.getAttribute("fill");
    expect(fill("0.3")).not.toBe(fill("8.3"));
  });

  it("names only the selected head, with a halo, and keeps it off the ring", () => {
    const { el } = view();
    const labels = [...el.querySelectorAll("text.cw-label")];
    expect(labels.map((t) => t.textContent)).toEqual(["L1H1"]);
    expect(labels[0]?.getAttribute("paint-order")).toBe("stroke");
  });

  it("shows one layer in colour and names its heads when the layer filter picks it", async () => {
    const { el } = view();
    const select = el.querySelector<HTMLSelectElement>("select.cw-layer-filter")!;
    expect(select.options).toHaveLength(BIG_L + 1);
    select.value = "5";
    select.dispatchEvent(new Event("change"));
    await nextFrame();
    const grey = el.querySelector('[data-cw-head="6.0"] .cw-mark')?.getAttribute("fill");
    expect(grey).toBe("#c9c9c9");
    expect(el.querySelector('[data-cw-head="5.0"] .cw-mark')?.getAttribute("fill")).not.toBe(grey);
    const names = [...el.querySelectorAll("text.cw-label")].map((t) => t.textContent);
    expect(names[0]).toBe("L1H1"); // the selected head stays named
    expect(names.filter((n) => n?.startsWith("L5H")).length).toBeGreaterThan(0);
    expect(names.every((n) => n === "L1H1" || n?.startsWith("L5H"))).toBe(true);
    // the emphasised layer is drawn over the grey crowd
    const order = [...el.querySelectorAll("[data-cw-head]")].map((g) => g.getAttribute("data-cw-head"));
    expect(order.indexOf("5.0")).toBeGreaterThan(order.indexOf("6.0"));
    expect(order.at(-1)).toBe("1.1");
  });

  it("selects a head typed by name, and says when the name is no head", async () => {
    const { m, el } = view();
    const input = el.querySelector<HTMLInputElement>(".cw-find input")!;
    input.value = "L20H17";
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter" }));
    expect(m.saves).toEqual([{ selected_layer: 20, selected_head: 17 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L20H17 selected/);
    input.value = "L40H1";
    el.querySelector<HTMLButtonElement>(".cw-find button")!.click();
    expect(el.querySelector(".cw-find-message")?.textContent).toMatch(/layers 0–31/);
    expect(m.saves).toHaveLength(1);
  });
});
