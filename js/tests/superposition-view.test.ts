// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { nextFrame, viewsCleanedAfterEach, wire } from "./weightspace-fixtures";

// P = 2 feature probabilities × D = 1 decay × T = 2 snapshots, m = 2, n = 3.
const P = 2;
const T = 2;
const n = 3;

function field(per: number, value: (p: number, t: number, i: number) => number, tail: number[]) {
  const data = new Float32Array(P * T * per);
  for (let p = 0; p < P; p++) for (let t = 0; t < T; t++) for (let i = 0; i < per; i++) data[(p * T + t) * per + i] = value(p, t, i);
  return { grid: wire(data, [P, 1, T, ...tail]), live: wire(data.slice(0, T * per), [1, 1, T, ...tail]) };
}

function state(extra: Record<string, unknown> = {}): Record<string, unknown> {
  // W[p, t] = [[1, 0, -1], [0, (t + 1) * (p + 1) / 4, 0]]: feature 0 along x, 1 along y, 2 opposite 0
  const W = field(2 * n, (p, t, k) => (k < n ? [1, 0, -1][k] ?? 0 : k === n + 1 ? ((t + 1) * (p + 1)) / 4 : 0), [2, n]);
  const norms = field(n, (p, t, i) => (i === 1 ? ((t + 1) * (p + 1)) / 4 : 1), [n]);
  const sup = field(n, (_p, _t, i) => (i === 1 ? 0 : 1), [n]);
  const dims = field(n, (_p, _t, i) => (i === 1 ? 1 : 0.5), [n]);
  const gram = field(n * n, (_p, _t, k) => (k % (n + 1) === 0 ? 1 : 0), [n, n]);
  const loss = field(1, (p, t) => 0.1 / (1 + p + t), []);
  const b = field(n, (_p, t, i) => -0.1 * i * (t + 1), [n]);
  const arrays: Record<string, { grid: unknown; live: unknown }> = { W, b, norms, superposition: sup, dimensionality: dims, gram, loss };
  const traits: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(arrays)) {
    traits[`grid_${k}`] = v.grid;
    traits[`live_${k}`] = v.live;
  }
  return {
    ...traits,
    grid_probability: wire(new Float32Array([1, 0.01]), [P]),
    grid_decay: wire(new Float32Array([1]), [1]),
    snapshot_steps: wire(new Int32Array([0, 100]), [T]),
    phase_densities: wire(new Float32Array([1, 0.1]), [2]),
    phase_ratios: wire(new Float32Array([0.5, 2]), [2]),
    phase: { view: new DataView(new Int8Array([0, 2, 1, 2]).buffer), dtype: "int8", shape: [2, 2] },
    phase_norm: wire(new Float32Array([0, 1, 1, 1]), [2, 2]),
    _view: "superposition",
    recipe: "3 features in 2 dimensions",
    feature_probability: 1,
    decay: 1,
    step: 1,
    selected_feature: -1,
    live_probability: 1,
    live_decay: 1,
    training: "",
    ...extra,
  };
}

const view = viewsCleanedAfterEach(state);

const arrows = (el: HTMLElement) =>
  Array.from(el.querySelectorAll(".cw-sp-geometry [data-cw-feature]"), (g) => [Number(g.getAttribute("data-cw-x")), Number(g.getAttribute("data-cw-y"))]);

describe("superposition view", () => {
  it("draws the four charts from the model the sliders point at", () => {
    const { el } = view();
    expect(el.querySelectorAll(".cw-sp-chart").length).toBe(4);
    expect(arrows(el)).toEqual([[1, 0], [0, 0.5], [-1, 0]]); // W of the live model (cell 0) at step 1
    expect(el.querySelectorAll(".cw-norm-bar").length).toBe(3);
    expect(el.querySelectorAll(".cw-sticky").length).toBe(6);
    expect(Array.from(el.querySelectorAll(".cw-phase"), (r) => r.getAttribute("data-cw-phase"))).toEqual(["0", "2", "1", "2"]);
    expect(el.dataset.cwSource).toBe("live");
    expect(el.querySelector("[data-cw-status]")?.textContent).toContain("step 100: 2 of 3 features represented");
  });

  it("scrubs the snapshots and selects a feature by clicking it", async () => {
    const { m, el } = view();
    const scrub = el.querySelector<HTMLInputElement>('input[data-cw-slider="step"]')!;
    scrub.value = "0";
    scrub.dispatchEvent(new Event("input"));
    await nextFrame();
    expect(m.saves.at(-1)).toEqual({ step: 0 });
    expect(arrows(el)[1]).toEqual([0, 0.25]);
    el.querySelector<SVGElement>('.cw-sp-gram [data-cw-feature="1"] .cw-norm-bar')!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextFrame();
    expect(m.get("selected_feature")).toBe(1);
    expect(el.querySelector("[data-cw-status]")?.textContent).toContain("feature 1: ‖W‖ 0.25");
  });

  it("offline, a slider snaps to the grid and shows the precomputed model, saying other values need a kernel", async () => {
    const { m, el } = view({ __offline__: true });
    const prob = el.querySelector<HTMLInputElement>('input[data-cw-slider="probability"]')!;
    prob.value = "900"; // 10^(-1.8) ≈ 0.016: snaps to the grid's 0.01
    prob.dispatchEvent(new Event("change"));
    await nextFrame();
    expect(m.get("feature_probability")).toBeCloseTo(0.01, 6);
    expect(el.dataset.cwSource).toBe("grid");
    expect(arrows(el)[1]).toEqual([0, 1]); // cell 1 at step 1
    expect(el.querySelector("[data-cw-status]")?.textContent).toContain("other slider values need a live kernel");
  });

  it("live, an off-grid value goes to the kernel and the nearest grid model shows while it retrains", async () => {
    const { m, el } = view();
    const prob = el.querySelector<HTMLInputElement>('input[data-cw-slider="probability"]')!;
    prob.value = "900";
    prob.dispatchEvent(new Event("change"));
    await nextFrame();
    expect(m.get("feature_probability")).toBeCloseTo(0.0158, 4); // not snapped: the kernel retrains it
    m.fromKernel({ training: "training" });
    await nextFrame();
    expect(el.dataset.cwSource).toBe("grid");
    const status = el.querySelector("[data-cw-status]")?.textContent ?? "";
    expect(status).toContain("retraining in the kernel");
    // the status names the model drawn (the grid's 0.01), never the sliders' 0.0158 beside that model's numbers
    expect(status.startsWith("model shown: 1 − S = 0.0100, decay 1.00, step 100: 3 of 3 features represented")).toBe(true);
    expect(status).toContain("(sliders: 1 − S = 0.0158");
  });

  it("draws both colour bars, WᵀW's fixed over the scrubber, dead features grey, and b", async () => {
    const { el } = view({ feature_probability: 0.01, live_probability: 0.01 });
    const ticks = () => Array.from(el.querySelectorAll(".cw-gram-bar .cw-colourbar-tick"), (t) => t.textContent);
    expect(el.querySelectorAll(".cw-gram-bar").length).toBe(1);
    expect(el.querySelectorAll(".cw-superposition-bar").length).toBe(1);
    const atLast = ticks();
    const scrub = el.querySelector<HTMLInputElement>('input[data-cw-slider="step"]')!;
    scrub.value = "0";
    scrub.dispatchEvent(new Event("input"));
    await nextFrame();
    expect(ticks()).toEqual(atLast);
    // the live model (cell 0) at step 0: feature 1's norm 0.25 is not represented
    expect(el.querySelector('.cw-sp-gram [data-cw-feature="1"] .cw-norm-bar')?.classList.contains("cw-dead")).toBe(true);
    expect(el.querySelector('.cw-sp-geometry [data-cw-feature="1"]')?.classList.contains("cw-dead")).toBe(true);
    expect(Array.from(el.querySelectorAll(".cw-bias"), (t) => t.getAttribute("data-cw-bias"))).toEqual(["0.0000", "-0.1000", "-0.2000"]);
    expect(el.querySelector(".cw-bias")?.textContent?.startsWith("+0.00")).toBe(true);
    expect(el.querySelectorAll(".cw-arrow-legend").length).toBe(1);
  });
});
