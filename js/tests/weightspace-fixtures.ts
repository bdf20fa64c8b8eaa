// States for the weight-space views, shaped as the kernel sends them.
import type { RenderProps } from "@anywidget/types";
import type { WireArray } from "../src/lib/arrays";
import widget from "../src/index";
import type { CompositionTraits } from "../src/views/composition";
import type { EigenTraits } from "../src/views/eigen";
import type { TermTraits } from "../src/views/termimportance";
import type { TrigramTraits } from "../src/views/skiptrigrams";
import { afterEach } from "vitest";
import { FakeModel } from "./fake-model";

export function wire(data: Float32Array | Int32Array | Uint8Array | Float64Array, shape: number[]): WireArray {
  const dtype = data instanceof Float32Array ? "float32" : data instanceof Int32Array ? "int32" : data instanceof Float64Array ? "float64" : "uint8";
  return { view: new DataView(data.buffer, data.byteOffset, data.byteLength), dtype, shape };
}

export const L = 2;
export const H = 3;
export const D_HEAD = 2;

/** scores[m, c, l, h] = (m + 1) * 0.1 * (c === 0 ? 1 : -1) + l * 0.3 + h * 0.05; qk_kcomp NaN in layer 0. */
export function eigenState(extra: Partial<EigenTraits> = {}): EigenTraits {
  const M = 3;
  const scores = new Float32Array(M * 3 * L * H);
  for (let m = 0; m < M; m++)
    for (let c = 0; c < 3; c++)
      for (let l = 0; l < L; l++)
        for (let h = 0; h < H; h++)
          scores[((m * 3 + c) * L + l) * H + h] = c === 2 && l === 0 ? Number.NaN : (m + 1) * 0.1 * (c === 0 ? 1 : -1) + l * 0.3 + h * 0.05;
  const eig = new Float32Array(3 * L * H * D_HEAD * 2);
  for (let i = 0; i < eig.length; i += 4) {
    eig[i] = 2; // λ₁ = 2 + 0i
    eig[i + 1] = 0;
    eig[i + 2] = -1; // λ₂ = −1 + 1i
    eig[i + 3] = 1;
  }
  const kcomp = new Int32Array(L * H * 2).fill(-1);
  for (let h = 0; h < H; h++) kcomp.set([0, h], (H + h) * 2);
  const det = new Float32Array(3 * L * H);
  det[(1 * L + 1) * H + 2] = 0.9; // induction score of L1H2
  return {
    _view: "eigen",
    model_name: "toy",
    methods: ["eigen", "diagonal", "topk"],
    method_notes: ["eigen note", "diagonal note", "topk note"],
    scores: wire(scores, [M, 3, L, H]),
    eigenvalues: wire(eig, [3, L, H, D_HEAD, 2]),
    kcomp_source: wire(kcomp, [L, H, 2]),
    detectors: wire(det, [3, L, H]),
    method: "eigen",
    qk_circuit: "qk_kcomp",
    selected_layer: 0,
    selected_head: 0,
    ...extra,
  };
}

export const TOKENS = ["<bos>", " the", "<b>x</b>", "\n", "cat", "dog", "sat", "mat"];

/**
 * Skip-trigram state: head [l, h] has rows (source s, dest, out) for s = 1..4,
 * with ov decreasing; sources 1..4 are precomputed with 2 destinations and 2 outs.
 * Head (1, 2) is not ready.
 */
export function trigramState(extra: Partial<TrigramTraits> = {}): TrigramTraits {
  const R = 6;
  const S = 5;
  const P = 2;
  const rows = new Int32Array(L * H * R * 4).fill(-1);
  const values = new Float32Array(L * H * R * 2);
  const profSources = new Int32Array(L * H * S).fill(-1);
  const profTokens = new Int32Array(L * H * S * 2 * P).fill(-1);
  const profValues = new Float32Array(L * H * S * 2 * P);
  const ready = new Uint8Array(L * H).fill(1);
  ready[1 * H + 2] = 0;
  for (let k = 0; k < L * H; k++) {
    for (let r = 0; r < 4; r++) {
      const s = r + 1;
      rows.set([s, (s + 1) % 8, r === 0 ? s : (s + 2) % 8, r % 2 === 0 ? 1 : 3], (k * R + r) * 4);
      values.set([0.5 * r - 0.5, 4 - r], (k * R + r) * 2);
    }
    for (let s = 0; s < 4; s++) {
      profSources[k * S + s] = s + 1;
      const off = (k * S + s) * 2 * P;
      profTokens.set([5, 6, 7, s + 1], off);
      profValues.set([2, 1, 3, 0.5], off);
    }
  }
  return {
    _view: "skiptrigrams",
    model_name: "toy",
    token_ids: wire(new Int32Array([100, 101, 102, 103, 104, 105, 106, 107]), [8]),
    token_strs: TOKENS,
    rows: wire(rows, [L, H, R, 4]),
    row_values: wire(values, [L, H, R, 2]),
    profile_sources: wire(profSources, [L, H, S]),
    profile_tokens: wire(profTokens, [L, H, S, 2, P]),
    profile_values: wire(profValues, [L, H, S, 2, P]),
    ready: wire(ready, [L, H]),
    // the kernel's canonical order for P = 2 (circuitwidgets.widgets.skip_trigrams.data.profile_order)
    profile_order: wire(new Int32Array([0, 0, 0, 1, 1, 0, 1, 1]), [4, 2]),
    k: 3,
    profile_k: P,
    d_vocab: 1000,
    live: {},
    source_message: "",
    selected_layer: 0,
    selected_head: 0,
    source_token: -1,
    source_query: "",
    selected_row: -1,
    ...extra,
  };
}

/** Composition: scores[k, l1, h1, l2, h2] = 0.1 * (k + 1) + 0.01 * (h1 * H + h2) for l1 < l2, NaN otherwise. */
export function compositionState(extra: Partial<CompositionTraits> = {}): CompositionTraits {
  const s = new Float32Array(3 * L * H * L * H).fill(Number.NaN);
  for (let k = 0; k < 3; k++)
    for (let h1 = 0; h1 < H; h1++) for (let h2 = 0; h2 < H; h2++) s[(((k * L + 0) * H + h1) * L + 1) * H + h2] = 0.1 * (k + 1) + 0.01 * (h1 * H + h2);
  return {
    _view: "composition",
    model_name: "toy",
    scores: wire(s, [3, L, H, L, H]),
    baseline_value: 0.15,
    subtract_baseline: true,
    kind: "all",
    n_edges: 6,
    selected_layer: 0,
    selected_head: 0,
    selected_edge: [],
    edge_kind: "",
    ...extra,
  };
}

export function termState(extra: Partial<TermTraits> = {}): TermTraits {
  return {
    _view: "termimportance",
    model_name: "toy",
    losses: wire(new Float64Array([5, 3.5, 3.4]), [3]),
    marginal: wire(new Float64Array([2.5, 1.5, 0.1]), [3]),
    layer_order1: wire(new Float64Array([0.9, 1.2]), [2]),
    loss_no_terms: 7.5,
    full_loss: 3.4,
    n_sequences: 1,
    n_positions: 20,
    selected_order: -1,
    selected_layer: -1,
    ...extra,
  };
}

/** Render a state through the bundle's `render`; returns the model, element and cleanup. */
export function mount<T extends Record<string, unknown>>(state: T): { m: FakeModel<T>; el: HTMLElement; cleanup: () => void } {
  const m = new FakeModel(state);
  const el = document.createElement("div");
  document.body.append(el);
  const c = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el, cleanup: typeof c === "function" ? c : () => undefined };
}

/**
 * A `view(extra)` that mounts a view on `makeState(extra)`. Every view it
 * mounted is cleaned up, and the document emptied, after each test of the
 * calling file. The returned `cleanup` runs once however often it is called,
 * so a test may call it itself.
 */
export function viewsCleanedAfterEach<T extends Record<string, unknown>>(
  makeState: (extra?: Partial<T>) => T,
): (extra?: Partial<T>) => { m: FakeModel<T>; el: HTMLElement; cleanup: () => void } {
  const pending: (() => void)[] = [];
  afterEach(() => {
    for (const c of pending.splice(0)) c();
    document.body.replaceChildren();
  });
  return (extra = {}) => {
    const r = mount(makeState(extra));
    let done = false;
    const cleanup = (): void => {
      if (done) return;
      done = true;
      r.cleanup();
    };
    pending.push(cleanup);
    return { ...r, cleanup };
  };
}

export const nextFrame = (): Promise<void> => new Promise((r) => setTimeout(r, 40));
