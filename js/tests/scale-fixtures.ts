// States of a many-head model (32 layers × 32 heads, as Llama-3-8B has), for
// the views that must stay legible at a thousand heads.
import type { CompositionTraits } from "../src/views/composition";
import type { EigenTraits } from "../src/views/eigen";
import { wire } from "./weightspace-fixtures";

export const BIG_L = 32;
export const BIG_H = 32;

/** A deterministic pseudo-random stream in [0, 1) (no test depends on Math.random). */
export function stream(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Eigen scores of a random-looking model: OV and QK scores crowd around 0 (as random heads do). */
export function bigEigenState(extra: Partial<EigenTraits> = {}, L = BIG_L, H = BIG_H): EigenTraits {
  const rand = stream(7);
  const scores = new Float32Array(3 * L * H);
  for (let c = 0; c < 3; c++)
    for (let l = 0; l < L; l++)
      for (let h = 0; h < H; h++) scores[(c * L + l) * H + h] = c === 2 && l === 0 ? Number.NaN : (rand() - 0.5) * 0.3;
  const eig = new Float32Array(3 * L * H * 2 * 2).fill(0.5);
  const kcomp = new Int32Array(L * H * 2).fill(-1);
  return {
    _view: "eigen",
    model_name: "big",
    methods: ["eigen"],
    method_notes: ["eigen note"],
    scores: wire(scores, [1, 3, L, H]),
    eigenvalues: wire(eig, [3, L, H, 2, 2]),
    kcomp_source: wire(kcomp, [L, H, 2]),
    detectors: wire(new Float32Array(3 * L * H), [3, L, H]),
    method: "eigen",
    qk_circuit: "qk",
    selected_layer: 1,
    selected_head: 1,
    ...extra,
  };
}

/** Composition scores of a random-looking model, with a few strong pairs: 5.4 → 9.2 (K) and 0.0 → 31.31 (V). */
export function bigCompositionState(extra: Partial<CompositionTraits> = {}, L = BIG_L, H = BIG_H): CompositionTraits {
  const rand = stream(11);
  const s = new Float32Array(3 * L * H * L * H).fill(Number.NaN);
  const at = (k: number, l1: number, h1: number, l2: number, h2: number) => (((k * L + l1) * H + h1) * L + l2) * H + h2;
  for (let k = 0; k < 3; k++)
    for (let l1 = 0; l1 < L; l1++)
      for (let h1 = 0; h1 < H; h1++)
        for (let l2 = l1 + 1; l2 < L; l2++) for (let h2 = 0; h2 < H; h2++) s[at(k, l1, h1, l2, h2)] = 0.1 + 0.05 * rand();
  s[at(1, 5, 4, 9, 2)] = 0.6;
  s[at(2, 0, 0, L - 1, H - 1)] = 0.5;
  return {
    _view: "composition",
    model_name: "big",
    scores: wire(s, [3, L, H, L, H]),
    baseline_value: 0.12,
    subtract_baseline: true,
    kind: "all",
    n_edges: 12,
    selected_layer: 9,
    selected_head: 2,
    selected_edge: [],
    edge_kind: "",
    ...extra,
  };
}
