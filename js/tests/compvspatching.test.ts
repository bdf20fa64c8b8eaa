// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { axisTitles, kindMeasured, labelledPoints, paddedDomain, pairName, pairPoints, pairText, pearson } from "../src/lib/compvspatching";
import { compWords, hasValues, toCompData } from "../src/lib/composition";
import { decodeArray } from "../src/lib/arrays";
import type { CompVsPatchingTraits } from "../src/views/compvspatching";
import { compositionState, H, L, nextFrame, viewsCleanedAfterEach, wire } from "./weightspace-fixtures";

/** Index of (k, l1, h1, l2, h2) in a [3, L, H, L, H] stack. */
const at = (k: number, l1: number, h1: number, l2: number, h2: number) => (((k * L + l1) * H + h1) * L + l2) * H + h2;

/**
 * K composition 0.2 + 0.01·(3·h1 + h2) (raw, baseline 0.2), path patching via k
 * 0.5 for L0H1 → L1H2 and 0.01·h2 otherwise; Q and V not patched (NaN).
 */
function state(extra: Partial<CompVsPatchingTraits> = {}): CompVsPatchingTraits {
  const comp = new Float32Array(3 * L * H * L * H).fill(Number.NaN);
  const path = new Float32Array(3 * L * H * L * H).fill(Number.NaN);
  for (let k = 0; k < 3; k++)
    for (let h1 = 0; h1 < H; h1++)
      for (let h2 = 0; h2 < H; h2++) {
        comp[at(k, 0, h1, 1, h2)] = 0.2 + 0.01 * (h1 * H + h2);
        if (k === 1) path[at(k, 0, h1, 1, h2)] = h1 === 1 && h2 === 2 ? 0.5 : 0.01 * h2;
      }
  return {
    _view: "compvspatching",
    model_name: "toy",
    composition: wire(comp, [3, L, H, L, H]),
    patching: wire(path, [3, L, H, L, H]),
    baseline_value: 0.2,
    metric: "normalised logit_diff(pos=-1)",
    note: "Corruption: <img src=x onerror=alert(1)> at position 3.",
    kind: "K",
    selected_edge: [],
    selected_layer: 0,
    selected_head: 0,
    ...extra,
  };
}

const view = viewsCleanedAfterEach(state);

describe("composition against path patching: pieces", () => {
  it("pairs the two numbers of each (earlier, later) pair measured by both", () => {
    const s = state();
    const comp = decodeArray(s.composition).data;
    const path = decodeArray(s.patching).data;
    const k = pairPoints(comp, path, L, H, 1, 0.2);
    expect(k).toHaveLength(H * H);
    const strongest = k.find((p) => p.h1 === 1 && p.h2 === 2)!;
    expect(strongest.x).toBeCloseTo(0.05, 6);
    expect(strongest.y).toBeCloseTo(0.5, 6);
    expect(pairPoints(comp, path, L, H, 0, 0.2)).toHaveLength(0); // via q not run
    expect(kindMeasured(path, L, H, 1)).toBe(true);
    expect(kindMeasured(path, L, H, 2)).toBe(false);
    expect(pairName(strongest)).toBe("L0H1 → L1H2");
    expect(pairText(strongest, "K", 0.2)).toBe("L0H1 → L1H2: K-composition 0.050 above baseline, path patching via k 0.500");
  });

  it("names its axes by the kind and the metric, and labels the strongest effects and the selection", () => {
    expect(axisTitles("K", "logit of ' the'", 0.089)).toEqual({ x: "K-composition score − random baseline (0.089)", y: "path patching via k: logit of ' the'" });
    expect(axisTitles("V", "", 0).x).toBe("V-composition score");
    const pts = [0.1, 0.4, 0.3, 0.2].map((y, i) => ({ l1: 0, h1: i, l2: 1, h2: 0, x: 0, y }));
    expect(labelledPoints(pts, 2, null).map((p) => p.h1)).toEqual([1, 2]);
    expect(labelledPoints(pts, 2, [0, 0, 1, 0]).map((p) => p.h1)).toEqual([1, 2, 0]);
    expect(paddedDomain([0.5, 1])).toEqual([-0.06, 1.06]);
    expect(paddedDomain([])).toEqual([-1, 1]);
  });

  it("computes Pearson's r, NaN where it is undefined", () => {
    const line = [0, 1, 2, 3].map((v) => ({ l1: 0, h1: v, l2: 1, h2: 0, x: v, y: 2 * v + 1 }));
    expect(pearson(line)).toBeCloseTo(1, 12);
    expect(pearson(line.map((p) => ({ ...p, y: -p.y })))).toBeCloseTo(-1, 12);
    expect(pearson(line.slice(0, 2))).toBeNaN();
    expect(pearson(line.map((p) => ({ ...p, y: 1 })))).toBeNaN();
  });
});

describe("composition against path patching: view", () => {
  it("draws a point per pair, names its axes, and offers only the kinds measured", () => {
    const { el } = view();
    expect(el.dataset.cwView).toBe("compvspatching");
    expect(el.querySelectorAll("[data-cw-pair]")).toHaveLength(H * H);
    const text = el.querySelector("svg")!.textContent ?? "";
    expect(text).toContain("K-composition score − random baseline (0.200)");
    expect(text).toContain("path patching via k: normalised logit_diff(pos=-1)");
    expect(text).toContain("L0H1 → L1H2"); // the strongest effect is labelled
    const buttons = [...el.querySelectorAll<HTMLButtonElement>(".cw-segmented button")];
    expect(buttons.map((b) => [b.dataset.value, b.disabled])).toEqual([["Q", true], ["K", false], ["V", true]]);
    expect(el.querySelector(".cw-note")?.textContent).toMatch(/^9 pairs of heads .*Pearson r = /);
  });

  it("shows the note as text", () => {
    const { el } = view();
    const note = el.querySelector("[data-cw-note]")!;
    expect(note.textContent).toBe("Corruption: <img src=x onerror=alert(1)> at position 3.");
    expect(el.querySelector("img")).toBeNull();
  });

  it("says a pair's numbers on hover and selects the pair and its later head on click", async () => {
    const { m, el } = view();
    const point = el.querySelector("[data-cw-pair='0.1-1.2'] .cw-dot")!;
    point.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    const status = () => el.querySelector("[data-cw-status]")?.textContent;
    expect(status()).toBe("L0H1 → L1H2: K-composition 0.050 above baseline, path patching via k 0.500");
    point.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_edge: [0, 1, 1, 2], selected_layer: 1, selected_head: 2 }]);
    await nextFrame();
    el.querySelector(".cw-plot")!.dispatchEvent(new MouseEvent("mouseleave"));
    expect(status()).toMatch(/^L0H1 → L1H2: .* \(selected\)$/);
  });

  it("follows a kind set in Python, and says when no pair of it was measured", async () => {
    const { m, el } = view();
    m.fromKernel({ kind: "V" });
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-pair]")).toHaveLength(0);
    expect(el.querySelector(".cw-note")?.textContent).toMatch(/path patching via v was not run/);
  });
});

describe("a composition map of other scores (a title)", () => {
  const titled = viewsCleanedAfterEach(compositionState);

  it("words values by the title, never as composition scores", () => {
    const w = compWords("Path patching: logit diff", true, 0);
    expect(w.heading).toBe("Path patching: logit diff");
    expect(w.mapTitle("K")).toBe("via k");
    expect(w.barLabel).toBe("Path patching: logit diff");
    expect(w.pair("K", "L0H1", "L1H2", 0.25)).toBe("L0H1 → L1H2 via k: 0.250");
    expect(compWords("Other score", true, 0.1).barLabel).toBe("Other score − baseline");
    expect(compWords("", true, 0.1).pair("Q", "L0H0", "L1H0", 0.25)).toBe("L0H0 → L1H0: Q-composition 0.250 above baseline");
  });

  it("titles the view, draws maps only of the kinds it has, and shows the note under the view as text", () => {
    // only K measured (Q and V NaN), as a path-patching map of k alone
    const base = compositionState();
    const scores = decodeArray(base.scores).data as Float32Array;
    const onlyK = scores.map((v, i) => (i >= L * H * L * H && i < 2 * L * H * L * H ? v : Number.NaN));
    const { el } = titled({ scores: wire(onlyK, [3, L, H, L, H]), baseline_value: 0, title: "Path patching: <b>metric</b>", note: "clean 3.4, corrupted <i>−1.1</i>" });
    expect(el.querySelector(".cw-title")?.textContent).toMatch(/^Path patching: <b>metric<\/b>/);
    expect([...el.querySelectorAll(".cw-map-title")].map((t) => t.textContent)).toEqual(["via k"]);
    expect(el.querySelector("[data-cw-note]")?.textContent).toBe("clean 3.4, corrupted <i>−1.1</i>");
    expect(el.querySelector("b, i")).toBeNull();
    const all = el.textContent ?? "";
    expect(all).not.toMatch(/composition/i);
    const d = toCompData(decodeArray(base.scores), 0);
    expect([0, 1, 2].map((k) => hasValues(d, k))).toEqual([true, true, true]);
  });
});
