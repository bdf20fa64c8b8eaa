// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { decodeArray } from "../src/lib/arrays";
import { coincident, eigenScore, headEigenvalues, headToSelect, placeLabels, scatterPoints, scoreDomain, stripRows, toEigenData } from "../src/lib/eigen";
import { eigenState, H, L, nextFrame, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(eigenState);

function data() {
  const s = eigenState();
  return toEigenData(decodeArray(s.scores), decodeArray(s.eigenvalues), decodeArray(s.kcomp_source), decodeArray(s.detectors));
}

describe("eigen scatter logic", () => {
  it("places every head at (OV score, chosen QK score) of a method", () => {
    const pts = scatterPoints(data(), 1, "qk");
    expect(pts).toHaveLength(L * H);
    expect(pts[H + 2]).toEqual({ layer: 1, head: 2, x: expect.closeTo(0.2 + 0.3 + 0.1, 5), y: expect.closeTo(-0.2 + 0.3 + 0.1, 5) });
    const kcomp = scatterPoints(data(), 0, "qk_kcomp");
    expect(kcomp.filter((p) => Number.isNaN(p.y)).map((p) => p.layer)).toEqual([0, 0, 0]);
  });

  it("reads eigenvalues and scores them as Σλ/Σ|λ|", () => {
    const e = headEigenvalues(data(), 0, 1, 1);
    expect(e).toEqual([[2, 0], [-1, 1]]);
    expect(eigenScore(e)).toBeCloseTo(1 / (2 + Math.SQRT2), 6);
    expect(eigenScore([])).toBeNaN();
    expect(scoreDomain("eigen")).toEqual([-1, 1]);
    expect(scoreDomain("topk")).toEqual([0, 1]);
  });

  it("refuses arrays of the wrong shape", () => {
    const s = eigenState();
    expect(() => toEigenData(decodeArray(s.scores), decodeArray(s.eigenvalues), decodeArray(s.kcomp_source), decodeArray(s.scores))).toThrow(/detectors/);
  });
});

describe("eigen scatter view", () => {
  it("draws one clickable point per head and says what is selected", () => {
    const { el } = view();
    expect(el.dataset.cwView).toBe("eigen");
    const points = el.querySelectorAll("[data-cw-head]");
    expect(points).toHaveLength(L * H);
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L0H0 selected/);
    expect(el.querySelector("[data-cw-export='svg']")).not.toBeNull();
  });

  it("clicking a head selects it in the kernel and shows its eigenvalues and detectors", async () => {
    const { m, el } = view();
    el.querySelector("[data-cw-head='1.2'] circle, [data-cw-head='1.2'] rect, [data-cw-head='1.2'] path")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 1, selected_head: 2 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L1H2 selected/);
    expect(el.querySelector(".cw-side-title")?.textContent).toBe("L1H2: eigenvalues");
    expect(el.querySelector(".cw-side")?.textContent).toContain("0.90");
    expect(el.querySelector(".cw-side")?.textContent).toContain("QK via L0H2");
  });

  it("switches the score definition in the front end", async () => {
    const { m, el } = view();
    const diag = [...el.querySelectorAll<HTMLButtonElement>(".cw-segmented button")].find((b) => b.dataset.value === "diagonal")!;
    diag.click();
    expect(m.get("method")).toBe("diagonal");
    await nextFrame();
    expect(diag.getAttribute("aria-pressed")).toBe("true");
    expect(el.querySelector(".cw-method-note")?.textContent).toContain("diagonal note");
  });

  it("follows the kernel and ignores an invalid selection", async () => {
    const { m, el } = view();
    m.fromKernel({ selected_layer: 1, selected_head: 1 });
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L1H1 selected/);
    m.fromKernel({ selected_head: 99 });
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^L1H0 selected/);
  });

  it("cleans up its listeners and elements", () => {
    const { m, el, cleanup } = view();
    expect(m.listenerCount()).toBeGreaterThan(0);
    cleanup();
    expect(m.listenerCount()).toBe(0);
    expect(el.childElementCount).toBe(0);
  });
});

describe("label placement", () => {
  const hit = (a: { x: number; y: number; width: number; height: number }, b: typeof a) =>
    a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  const coversCircle = (b: { x: number; y: number; width: number; height: number }, c: { x: number; y: number; r: number }) => {
    const nx = Math.max(b.x, Math.min(c.x, b.x + b.width));
    const ny = Math.max(b.y, Math.min(c.y, b.y + b.height));
    return (nx - c.x) ** 2 + (ny - c.y) ** 2 < c.r * c.r;
  };

  it("keeps labels off each other, off every dot and off the selection ring", () => {
    // the report's case: L1H1 selected (ring r = 11), L1H2 right next to it
    const ring = { x: 200, y: 200, r: 13 };
    const dots = [ring, { x: 214, y: 196, r: 7 }, { x: 190, y: 188, r: 7 }, { x: 300, y: 300, r: 7 }];
    const boxes = placeLabels(
      [
        { x: 200, y: 200, width: 30, height: 12, clear: 14, required: true },
        { x: 214, y: 196, width: 25, height: 10 },
        { x: 190, y: 188, width: 25, height: 10 },
        { x: 300, y: 300, width: 25, height: 10 },
      ],
      dots,
    );
    const placed = boxes.filter((b) => b !== null);
    expect(placed.length).toBeGreaterThanOrEqual(3);
    expect(boxes[0]).not.toBeNull();
    for (const [i, b] of placed.entries()) {
      for (const c of dots) expect(coversCircle(b, c)).toBe(false);
      for (const other of placed.slice(i + 1)) expect(hit(b, other)).toBe(false);
    }
  });

  it("leaves out a label with no free spot unless it is required, and stays in bounds", () => {
    const crowd = Array.from({ length: 40 }, (_, i) => ({ x: 100 + (i % 8) * 6, y: 100 + Math.floor(i / 8) * 6, r: 6 }));
    const [free, forced] = placeLabels(
      [
        { x: 121, y: 112, width: 30, height: 10 },
        { x: 121, y: 112, width: 30, height: 10, required: true },
      ],
      crowd,
    );
    expect(free).toBeNull();
    expect(forced).not.toBeNull();
    const [edge] = placeLabels([{ x: 395, y: 5, width: 30, height: 10 }], [], { x: 0, y: 0, width: 400, height: 400 });
    expect(edge).not.toBeNull();
    expect((edge?.x ?? 0) + (edge?.width ?? 0)).toBeLessThanOrEqual(400);
    expect(edge?.y ?? -1).toBeGreaterThanOrEqual(0);
  });

  it("dodges dots on the n/a strip into rows so none hides another", () => {
    expect(stripRows([10, 12, 40, 11], 13)).toEqual([0, 2, 0, 1]); // by x: 10, 11, 12 each take a new row
    expect(stripRows([], 13)).toEqual([]);
  });
});

describe("heads drawn on one point", () => {
  const points = [
    { id: "1.9", x: 300, y: 40 },
    { id: "1.5", x: 300, y: 40 },
    { id: "1.7", x: 301, y: 41 },
    { id: "0.11", x: 120, y: 200 },
  ];
  it("lists every head within a few pixels, in head order", () => {
    expect(coincident(points, points[0]!)).toEqual(["1.5", "1.7", "1.9"]);
    expect(coincident(points, points[3]!)).toEqual(["0.11"]);
  });
  it("cycles through them on repeated clicks, and selects a lone head directly", () => {
    expect(headToSelect(points, points[1]!, "0.11")).toBe("1.5");
    expect(headToSelect(points, points[1]!, "1.5")).toBe("1.7");
    expect(headToSelect(points, points[1]!, "1.7")).toBe("1.9");
    expect(headToSelect(points, points[1]!, "1.9")).toBe("1.5");
    expect(headToSelect(points, points[3]!, "1.5")).toBe("0.11");
  });
});
