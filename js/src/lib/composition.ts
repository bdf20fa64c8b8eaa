// Composition scores as the view reads them: checked, on a shared colour
// scale, as heatmap cells (earlier heads × later heads). No DOM.

import { divergingIndex, sequentialIndex } from "./colour";
import { type CompData, compValue, type Kind, KIND_STYLE } from "./graph";
import type { CellSource } from "./heatmap";
import { fmt } from "./svg";

/** Check and wrap the decoded scores. */
export function toCompData(scores: { data: ArrayLike<number>; shape: number[] }, baseline: number): CompData {
  const [k = 0, L = 0, H = 0, L2 = 0, H2 = 0] = scores.shape;
  if (scores.shape.length !== 5 || k !== 3 || L !== L2 || H !== H2 || !(scores.data instanceof Float32Array))
    throw new Error(`circuitwidgets: composition scores of shape [${scores.shape.join(", ")}] are not float32 [3, L, H, L, H]`);
  return { nLayers: L, nHeads: H, scores: scores.data, baseline: Number.isFinite(baseline) ? baseline : 0 };
}

/**
 * Heatmap of one kind: rows are earlier heads (layers 0..L-2), columns later
 * heads (layers 1..L-1); cells whose row head is not earlier are empty (-1).
 */
export function heatmapCells(d: CompData, k: number, subtract: boolean, limit: number): CellSource {
  const H = d.nHeads;
  const n = Math.max(0, (d.nLayers - 1) * H);
  return {
    rows: n,
    cols: n,
    index: (r, c) => {
      const l1 = Math.floor(r / H);
      const l2 = Math.floor(c / H) + 1;
      const v = compValue(d, k, l1, r % H, l2, c % H, subtract);
      if (!Number.isFinite(v)) return -1;
      return subtract ? divergingIndex(v, limit) : sequentialIndex(v / limit);
    },
  };
}

/** Largest |value| over all kinds (the shared colour scale). */
export function colourLimit(d: CompData, subtract: boolean): number {
  let limit = 0;
  for (let k = 0; k < 3; k++)
    for (let l2 = 1; l2 < d.nLayers; l2++)
      for (let h2 = 0; h2 < d.nHeads; h2++)
        for (let l1 = 0; l1 < l2; l1++)
          for (let h1 = 0; h1 < d.nHeads; h1++) {
            const v = Math.abs(compValue(d, k, l1, h1, l2, h2, subtract));
            if (v > limit) limit = v;
          }
  return limit > 0 ? limit : 1;
}

/** Whether kind `k` has any value (a titled map may leave a kind unmeasured, all NaN). */
export function hasValues(d: CompData, k: number): boolean {
  for (let l2 = 1; l2 < d.nLayers; l2++)
    for (let h2 = 0; h2 < d.nHeads; h2++)
      for (let l1 = 0; l1 < l2; l1++)
        for (let h1 = 0; h1 < d.nHeads; h1++) if (Number.isFinite(compValue(d, k, l1, h1, l2, h2, false))) return true;
  return false;
}

/** What a later head's input of each kind is called (titled maps show other scores in the same slots). */
const INPUT: Record<Kind, string> = { Q: "queries", K: "keys", V: "values" };

/** The words a composition view says about its values: composition scores, or (with a title) any score per pair. */
export interface CompWords {
  /** The view's title. */
  heading: string;
  /** Title of a kind's heatmap. */
  mapTitle(kind: Kind): string;
  /** A kind in the legend under the graph. */
  keyLabel(kind: Kind): string;
  /** The colour bar's label. */
  barLabel: string;
  /** A pair's value of a kind, in words: "L0H11 → L1H5: K-composition 0.131 above baseline". */
  pair(kind: Kind, from: string, to: string, v: number): string;
  /** A value alone: "0.131 above baseline", "n/a" where it is missing. */
  value(v: number): string;
}

/**
 * The words of a map. With no `title` they are the composition scores' own (minus
 * the random baseline when `subtract`); with one, the maps are "via q/k/v", the
 * colour bar says the title, and nothing says "composition" (a path-patching map).
 */
export function compWords(title: string, subtract: boolean, baseline: number): CompWords {
  const above = subtract && (title === "" || baseline !== 0) ? " above baseline" : "";
  const value = (v: number) => (Number.isFinite(v) ? `${fmt(v, 3)}${above}` : "n/a");
  if (title === "") {
    return {
      heading: "Composition between heads",
      mapTitle: (kind) => `${kind}-composition`,
      keyLabel: (kind) => KIND_STYLE[kind].label,
      barLabel: subtract ? "composition score − random baseline" : "composition score",
      pair: (kind, from, to, v) => `${from} → ${to}: ${kind}-composition ${value(v)}`,
      value,
    };
  }
  return {
    heading: title,
    mapTitle: (kind) => `via ${kind.toLowerCase()}`,
    keyLabel: (kind) => `via ${kind.toLowerCase()} (the later head's ${INPUT[kind]})`,
    barLabel: subtract && baseline !== 0 ? `${title} − baseline` : title,
    pair: (kind, from, to, v) => `${from} → ${to} via ${kind.toLowerCase()}: ${value(v)}`,
    value,
  };
}
