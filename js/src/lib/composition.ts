// Composition scores as the view reads them: checked, on a shared colour
// scale, as heatmap cells (earlier heads × later heads). No DOM.

import { divergingIndex, sequentialIndex } from "./colour";
import { type CompData, compValue } from "./graph";
import type { CellSource } from "./heatmap";

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
