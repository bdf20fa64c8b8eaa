// Attention patterns as sent by `circuitwidgets.AttentionPatterns`.
//
// Weights are quantised to uint8 (`round(255 * a)`). A causal pattern has
// nothing above the diagonal, so only the lower triangle is sent: head
// `[layer, head]` holds rows dest = 0..n-1 one after another, row `dest`
// being the `dest + 1` weights to src = 0..dest, starting at offset
// `dest * (dest + 1) / 2`. Shapes:
//   causal:     [n_layers, n_heads, n * (n + 1) / 2]
//   not causal: [n_layers, n_heads, n, n]
//   streaming:  [n_layers, n_heads, 0]  (heads arrive in custom messages)
//   a batch:    [n_prompts, ...] padded on the right to the longest prompt's
//               `width` tokens; prompt p of n_p tokens is read in place
//               (`promptPatterns`): its causal rows are the first n_p(n_p+1)/2
//               bytes of each head, its full rows the first n_p of each row.
// `value_patterns` (value-weighted, rows normalised) has the same layout.

import type { NDArray } from "./arrays";
import type { CellSource } from "./heatmap";

export interface Patterns {
  nLayers: number;
  nHeads: number;
  nTokens: number;
  causal: boolean;
  /** Quantised weights, layout described above. */
  data: Uint8Array;
  /** Tokens each head is stored for (a padded batch: the longest prompt's); `nTokens` when absent. */
  width?: number;
  /** Per head (`layer * nHeads + head`), 1 once its weights are in `data`; null when all are. */
  ready: Uint8Array | null;
}

/** A rectangle of cells: rows `r0..r0+rows-1`, columns `c0..c0+cols-1`. */
export interface Region {
  r0: number;
  c0: number;
  rows: number;
  cols: number;
}

/** Number of weights of one causal head over `n` tokens. */
export function triangleSize(n: number): number {
  return (n * (n + 1)) / 2;
}

/** Weights stored per head. */
export function headSize(n: number, causal: boolean): number {
  return causal ? triangleSize(n) : n * n;
}

/** Whether a decoded `patterns` array is the streaming placeholder `[L, H, 0]`. */
export function isPlaceholder(array: NDArray, nTokens: number): boolean {
  return array.shape.length === 3 && array.shape[2] === 0 && nTokens > 0;
}

/** Check and wrap a decoded `patterns` array (a placeholder gives empty heads waiting for `fillHead`). */
export function toPatterns(array: NDArray, nTokens: number, causal: boolean): Patterns {
  if (!(array.data instanceof Uint8Array)) throw new Error("circuitwidgets: attention patterns must be uint8");
  const [nLayers = 0, nHeads = 0] = array.shape;
  if (isPlaceholder(array, nTokens)) return pendingPatterns(nLayers, nHeads, nTokens, causal);
  const expected = causal ? 3 : 4;
  const per = headSize(nTokens, causal);
  if (array.shape.length !== expected || array.data.length !== nLayers * nHeads * per) {
    throw new Error(
      `circuitwidgets: patterns of shape [${array.shape.join(", ")}] do not match ${nTokens} tokens (${causal ? "causal" : "full"})`,
    );
  }
  return { nLayers, nHeads, nTokens, causal, data: array.data, ready: null };
}

/** Patterns whose heads are still to come (all zero, none ready). */
export function pendingPatterns(nLayers: number, nHeads: number, nTokens: number, causal: boolean): Patterns {
  const data = new Uint8Array(nLayers * nHeads * headSize(nTokens, causal));
  return { nLayers, nHeads, nTokens, causal, data, ready: new Uint8Array(nLayers * nHeads) };
}

/** Whether head `[layer, head]` holds its weights. */
export function headReady(p: Patterns, layer: number, head: number): boolean {
  return p.ready === null || p.ready[layer * p.nHeads + head] === 1;
}

/** Heads that hold their weights. */
export function readyCount(p: Patterns): number {
  if (p.ready === null) return p.nLayers * p.nHeads;
  let k = 0;
  for (const r of p.ready) k += r;
  return k;
}

/**
 * Prompt `prompt` (of `nTokens` tokens) of a batch `[n_prompts, n_layers, n_heads, ...]`
 * padded to `width` tokens, read in place (no copy); throws when the shape does not fit.
 */
export function promptPatterns(array: NDArray, prompt: number, nTokens: number, width: number, causal: boolean): Patterns {
  if (!(array.data instanceof Uint8Array)) throw new Error("circuitwidgets: attention patterns must be uint8");
  const [nPrompts = 0, nLayers = 0, nHeads = 0, ...tail] = array.shape;
  const per = headSize(width, causal);
  const expected = causal ? [per] : [width, width];
  const size = nLayers * nHeads * per;
  if (
    tail.join() !== expected.join() ||
    array.data.length !== nPrompts * size ||
    !(prompt >= 0 && prompt < nPrompts && nTokens >= 1 && nTokens <= width)
  ) {
    throw new Error(`circuitwidgets: batch patterns of shape [${array.shape.join(", ")}] have no prompt ${prompt} of ${nTokens} tokens padded to ${width}`);
  }
  return { nLayers, nHeads, nTokens, causal, data: array.data.subarray(prompt * size, (prompt + 1) * size), ready: null, width };
}

/** Tokens each head of `p` is stored for. */
export function storedSide(p: Patterns): number {
  return p.width ?? p.nTokens;
}

/** Copy one streamed head's bytes into `p` (throws when the length is wrong or the head is out of range). */
export function fillHead(p: Patterns, layer: number, head: number, bytes: Uint8Array): void {
  const per = headSize(storedSide(p), p.causal);
  if (!(layer >= 0 && layer < p.nLayers && head >= 0 && head < p.nHeads) || bytes.length !== per) {
    throw new Error(`circuitwidgets: streamed head [${layer}, ${head}] of ${bytes.length} bytes does not fit (${per} per head)`);
  }
  p.data.set(bytes, headOffset(p, layer, head));
  if (p.ready !== null) {
    p.ready[layer * p.nHeads + head] = 1;
    if (p.ready.every((r) => r === 1)) p.ready = null;
  }
}

/** Offset of the first weight of head `[layer, head]`. */
export function headOffset(p: Patterns, layer: number, head: number): number {
  return (layer * p.nHeads + head) * headSize(storedSide(p), p.causal);
}

/** Quantised weight 0–255 of dest → src, or -1 above the diagonal of a causal pattern. */
export function weightAt(p: Patterns, layer: number, head: number, dest: number, src: number): number {
  const base = headOffset(p, layer, head);
  if (p.causal) return src > dest ? -1 : (p.data[base + triangleSize(dest) + src] as number);
  return p.data[base + dest * storedSide(p) + src] as number;
}

/** Weights (0–1) of destination `dest` over all sources; zero above the causal diagonal. */
export function rowWeights(p: Patterns, layer: number, head: number, dest: number): Float32Array {
  const out = new Float32Array(p.nTokens);
  const base = headOffset(p, layer, head);
  const start = p.causal ? base + triangleSize(dest) : base + dest * storedSide(p);
  const len = p.causal ? dest + 1 : p.nTokens;
  for (let s = 0; s < len; s++) out[s] = (p.data[start + s] as number) / 255;
  return out;
}

/** Weights (0–1) that all destinations give to source `src` (the reverse of `rowWeights`). */
export function columnWeights(p: Patterns, layer: number, head: number, src: number): Float32Array {
  const out = new Float32Array(p.nTokens);
  const base = headOffset(p, layer, head);
  const n = p.nTokens;
  const w = storedSide(p);
  if (p.causal) {
    for (let d = src; d < n; d++) out[d] = (p.data[base + (d * (d + 1)) / 2 + src] as number) / 255;
  } else {
    for (let d = 0; d < n; d++) out[d] = (p.data[base + d * w + src] as number) / 255;
  }
  return out;
}

/** One head as heatmap cells (LUT index = quantised weight; -1 above the causal diagonal). */
export function headCells(p: Patterns, layer: number, head: number): CellSource {
  const n = p.nTokens;
  const w = storedSide(p);
  const base = headOffset(p, layer, head);
  const data = p.data;
  return p.causal
    ? { rows: n, cols: n, index: (r, c) => (c > r ? -1 : (data[base + (r * (r + 1)) / 2 + c] as number)) }
    : { rows: n, cols: n, index: (r, c) => data[base + r * w + c] as number };
}

/**
 * The cells of `region` of one head, max-pooled onto at most `maxRows` ×
 * `maxCols` cells: a block shows its strongest weight, so a thin structure
 * such as a previous-token diagonal survives the shrinking; a block wholly
 * above the causal diagonal is -1 (no value). Unpooled (one cell per weight)
 * when the region already fits. One pass over the region's weights.
 */
export function regionCells(p: Patterns, layer: number, head: number, region: Region, maxRows: number, maxCols: number = maxRows): CellSource {
  const n = p.nTokens;
  const r0 = Math.max(0, Math.min(n, region.r0));
  const c0 = Math.max(0, Math.min(n, region.c0));
  const rows = Math.max(0, Math.min(region.rows, n - r0));
  const cols = Math.max(0, Math.min(region.cols, n - c0));
  const m = Math.max(1, Math.min(Math.floor(maxRows), rows));
  const k = Math.max(1, Math.min(Math.floor(maxCols), cols));
  if (rows === 0 || cols === 0) return { rows: 0, cols: 0, index: () => -1 };
  const colBlock = new Int32Array(cols);
  for (let c = 0; c < cols; c++) colBlock[c] = Math.floor((c * k) / cols);
  const pooled = new Int16Array(m * k).fill(-1);
  const base = headOffset(p, layer, head);
  const data = p.data;
  for (let r = 0; r < rows; r++) {
    const dest = r0 + r;
    const rowOut = Math.floor((r * m) / rows) * k;
    const start = p.causal ? base + (dest * (dest + 1)) / 2 : base + dest * storedSide(p);
    const last = p.causal ? Math.min(cols, dest - c0 + 1) : cols; // columns with a value in this row
    for (let c = 0; c < last; c++) {
      const cell = rowOut + (colBlock[c] as number);
      const w = data[start + c0 + c] as number;
      if (w > (pooled[cell] as number)) pooled[cell] = w;
    }
  }
  return { rows: m, cols: k, index: (r, c) => pooled[r * k + c] as number };
}

/**
 * One head max-pooled onto a `size` × `size` grid (for thumbnails); see
 * `regionCells`. Short sequences are not upsampled.
 */
export function pooledCells(p: Patterns, layer: number, head: number, size: number): CellSource {
  return regionCells(p, layer, head, { r0: 0, c0: 0, rows: p.nTokens, cols: p.nTokens }, size);
}

/** Largest |value| of a per-position array row `[layer, head, :]`, ignoring NaN (0 when none). */
export function absMax(values: Float32Array, offset: number, length: number): number {
  let m = 0;
  for (let i = offset; i < offset + length; i++) {
    const v = Math.abs(values[i] as number);
    if (v > m) m = v;
  }
  return m;
}
