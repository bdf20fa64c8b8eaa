// @vitest-environment happy-dom
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import { FakeModel } from "./fake-model";
import { compositionState, eigenState, nextFrame, termState, trigramState } from "./weightspace-fixtures";

function attentionData() {
  const n = 4;
  const per = (n * (n + 1)) / 2;
  const data = new Uint8Array(2 * 3 * per);
  for (let k = 0; k < 6; k++) for (let d = 0; d < n; d++) data[k * per + (d * (d + 1)) / 2 + Math.max(0, d - 1)] = 255;
  return { tokens: ["<bos>", "a", "<i>b</i>", "a"], patterns: { view: new DataView(data.buffer), dtype: "uint8", shape: [2, 3, per] }, causal: true };
}

function pick<T extends Record<string, unknown>>(state: T, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, state[k]]));
}

const HEAD = { selected_layer: "selected_layer", selected_head: "selected_head" };

/** What the kernel sends as `_children` (tests/test_widget_spec.py checks the kernel side). */
export const CHILDREN = [
  { view: "eigen", prefix: "eigen_", data: "eigen_data", own: ["method", "qk_circuit"], shared: HEAD },
  { view: "attention", prefix: "attention_", data: "attention_data", own: ["pattern_kind", "show_diagonals", "selected_dest", "selected_src"], shared: HEAD },
  { view: "composition", prefix: "composition_", data: "composition_data", own: ["subtract_baseline", "kind", "n_edges", "selected_edge", "edge_kind"], shared: HEAD },
  { view: "skiptrigrams", prefix: "trigram_", data: "trigram_data", own: ["source_token", "source_query", "selected_row", "live", "source_message"], shared: HEAD },
  { view: "termimportance", prefix: "terms_", data: "terms_data", own: ["selected_order"], shared: { selected_layer: "selected_layer" } },
];

function explorerState(): Record<string, unknown> {
  const e = eigenState();
  const t = trigramState();
  const c = compositionState();
  const ti = termState();
  return {
    _view: "explorer",
    _children: CHILDREN,
    model_name: "toy",
    eigen_data: pick(e, ["model_name", "methods", "method_notes", "scores", "eigenvalues", "kcomp_source", "detectors"]),
    trigram_data: pick(t, ["token_ids", "token_strs", "rows", "row_values", "profile_sources", "profile_tokens", "profile_values", "ready", "profile_order", "k", "profile_k", "d_vocab", "model_name"]),
    composition_data: pick(c, ["scores", "baseline_value", "model_name"]),
    terms_data: pick(ti, ["losses", "marginal", "layer_order1", "loss_no_terms", "full_loss", "n_sequences", "n_positions", "model_name"]),
    attention_data: attentionData(),
    selected_layer: 1,
    selected_head: 2,
    eigen_method: "eigen",
    eigen_qk_circuit: "qk_kcomp",
    trigram_source_token: -1,
    trigram_source_query: "",
    trigram_source_message: "",
    trigram_live: {},
    trigram_selected_row: -1,
    composition_subtract_baseline: true,
    composition_kind: "all",
    composition_n_edges: 6,
    composition_selected_edge: [],
    composition_edge_kind: "",
    terms_selected_order: -1,
    attention_selected_dest: -1,
    attention_selected_src: -1,
  };
}

let cleanup: (() => void) | undefined;
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
  document.body.replaceChildren();
});

function mountExplorer(extra: Record<string, unknown> = {}) {
  const m = new FakeModel<Record<string, unknown>>({ ...explorerState(), ...extra });
  const el = document.createElement("div");
  document.body.append(el);
  const c = widget.render({ model: m.asModel(), el } as unknown as RenderProps);
  cleanup = typeof c === "function" ? c : undefined;
  return { m, el };
}

const status = (el: HTMLElement, view: string) => el.querySelector(`[data-cw-view='${view}'] [data-cw-status]`)?.textContent ?? "";

describe("circuit explorer", () => {
  it("renders every view, each with its data-cw-view, on the shared selection", () => {
    const { el } = mountExplorer();
    expect(el.dataset.cwView).toBe("explorer");
    for (const v of ["eigen", "attention", "composition", "skiptrigrams", "termimportance"]) expect(el.querySelector(`[data-cw-view='${v}']`)).not.toBeNull();
    expect(el.querySelector(":scope > [data-cw-status]")?.textContent).toMatch(/^L1H2 selected \(previous-token 0\.00, induction 0\.90/);
    expect(status(el, "eigen")).toMatch(/^L1H2 selected/);
    expect(status(el, "composition")).toBe("L1H2 selected");
    expect(status(el, "skiptrigrams")).toBe("L1H2 selected");
  });

  it("selecting a head in the scatter updates every view and the kernel trait", async () => {
    const { m, el } = mountExplorer();
    el.querySelector("[data-cw-view='eigen'] [data-cw-head='0.1'] circle")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 0, selected_head: 1 }]);
    await nextFrame();
    expect(status(el, "eigen")).toMatch(/^L0H1 selected/);
    expect(status(el, "composition")).toBe("L0H1 selected");
    expect(status(el, "skiptrigrams")).toBe("L0H1 selected");
    expect(el.querySelector(":scope > [data-cw-status]")?.textContent).toMatch(/^L0H1 selected/);
    const thumb = el.querySelector<HTMLElement>("[data-cw-view='attention'] .cw-thumb.cw-selected");
    expect(thumb?.dataset.cwHead).toBe("0.1");
  });

  it("an edge click in the composition map selects the later head everywhere and keeps the edge in its own trait", async () => {
    const { m, el } = mountExplorer();
    el.querySelector("[data-cw-view='composition'] [data-cw-edge='0.2-1.0'] path")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.get("composition_selected_edge")).toEqual([0, 2, 1, 0]);
    expect(m.get("selected_head")).toBe(0);
    await nextFrame();
    expect(status(el, "eigen")).toMatch(/^L1H0 selected/);
    expect(status(el, "composition")).toMatch(/^Edge L0H2 → L1H0/);
  });

  it("view settings land in the explorer's prefixed traits", async () => {
    const { m, el } = mountExplorer({ selected_layer: 0, selected_head: 0 });
    (el.querySelector("[data-cw-view='skiptrigrams'] tr[data-cw-row='1'] td") as HTMLElement).click();
    expect(m.get("trigram_selected_row")).toBe(1);
    [...el.querySelectorAll<HTMLButtonElement>("[data-cw-view='eigen'] .cw-segmented button")].find((b) => b.dataset.value === "topk")!.click();
    expect(m.get("eigen_method")).toBe("topk");
  });

  it("cleans up every view's listeners", () => {
    const { m } = mountExplorer();
    expect(m.listenerCount()).toBeGreaterThan(0);
    cleanup?.();
    cleanup = undefined;
    expect(m.listenerCount()).toBe(0);
  });
});
