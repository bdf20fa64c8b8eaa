// What the attention view draws from: a `PatternSource` per kind of pattern.
// Dense patterns (uint8 traits, heads possibly streaming in as custom
// messages) and long contexts (an overview plus tiles asked of the kernel,
// ./long.ts) answer the same questions, so thumbnails, the main canvas, the
// token strip and the words are written once.

import type { WireArray } from "../../lib/arrays";
import { decodeOptional } from "../../lib/arrays";
import { type ColourScale, rowMaxima, scaleCells } from "../../lib/attentionui";
import type { CellSource } from "../../lib/heatmap";
import {
  columnWeights,
  fillHead,
  headReady,
  type Patterns,
  readyCount,
  regionCells,
  rowWeights,
  weightAt,
} from "../../lib/patterns";
import type { Viewport } from "../../lib/viewport";

/** One weight as known: `value` in [0, 1] (-1 masked, NaN unknown), exact or the max of a `block` × `block` block. */
export interface Weight {
  value: number;
  exact: boolean;
  block: number;
}

export interface PatternSource {
  readonly nLayers: number;
  readonly nHeads: number;
  readonly nTokens: number;
  readonly causal: boolean;
  /** Whether the head can be drawn (a long context's head may be drawn while some of its rows are still to come). */
  ready(layer: number, head: number): boolean;
  /** Whether the whole head is known. */
  complete(layer: number, head: number): boolean;
  /** Heads wholly known. */
  readyCount(): number;
  /** The viewport's cells pooled to at most `maxPx` a side, as LUT indices under `scale` (-1: none). */
  cells(layer: number, head: number, view: Viewport, maxPx: number, scale: ColourScale): CellSource;
  /** The weight of one cell as far as it is known. */
  weight(layer: number, head: number, dest: number, src: number): Weight;
  /** Weights of row `dest` over sources `start..end-1` (NaN unknown), or null when the head is not ready. */
  row(layer: number, head: number, dest: number, start: number, end: number): Float32Array | null;
  /** Weights paid to source `src` by destinations `start..end-1`, or null. */
  column(layer: number, head: number, src: number, start: number, end: number): Float32Array | null;
}

/** A source over dense quantised patterns (`lib/patterns.ts`); streamed heads fill `p` in place. */
export function denseSource(p: Patterns): PatternSource {
  return {
    nLayers: p.nLayers,
    nHeads: p.nHeads,
    nTokens: p.nTokens,
    causal: p.causal,
    ready: (layer, head) => headReady(p, layer, head),
    complete: (layer, head) => headReady(p, layer, head),
    readyCount: () => readyCount(p),
    cells(layer, head, view, maxPx, scale) {
      const cells = regionCells(p, layer, head, { r0: view.r0, c0: view.c0, rows: view.size, cols: view.size }, maxPx);
      const maxima = scale === "row" ? rowMaxima(p, layer, head, view.r0, view.size, cells.rows) : null;
      return scaleCells(cells, scale, maxima);
    },
    weight(layer, head, dest, src) {
      const w = weightAt(p, layer, head, dest, src);
      return { value: w < 0 ? -1 : w / 255, exact: true, block: 1 };
    },
    row: (layer, head, dest, start, end) => (headReady(p, layer, head) ? rowWeights(p, layer, head, dest).subarray(start, end) : null),
    column: (layer, head, src, start, end) =>
      headReady(p, layer, head) ? columnWeights(p, layer, head, src).subarray(start, end) : null,
  };
}

/** Prompt `prompt`'s part `[L, H, n]` of a batch's per-position array `[P, L, H, width]` (a copy; null when absent or mis-shaped). */
export function promptPositions(
  wire: WireArray | null | undefined,
  prompt: number,
  nLayers: number,
  nHeads: number,
  nTokens: number,
  width: number,
): Float32Array | null {
  const a = decodeOptional(wire);
  if (a === null || !(a.data instanceof Float32Array) || a.shape.length !== 4 || a.shape[3] !== width) return null;
  const rows = nLayers * nHeads;
  if (a.data.length !== (a.shape[0] ?? 0) * rows * width || prompt < 0 || prompt >= (a.shape[0] ?? 0) || nTokens > width) return null;
  const out = new Float32Array(rows * nTokens);
  for (let r = 0; r < rows; r++) {
    const from = (prompt * rows + r) * width;
    out.set(a.data.subarray(from, from + nTokens), r * nTokens);
  }
  return out;
}

/** Read the per-position array `[L, H, n]` (or null when absent or mis-shaped). */
export function perPosition(wire: WireArray | null | undefined, nLayers: number, nHeads: number, nTokens: number): Float32Array | null {
  const a = decodeOptional(wire);
  if (a === null || !(a.data instanceof Float32Array)) return null;
  return a.data.length === nLayers * nHeads * nTokens ? a.data : null;
}

/**
 * Fill streamed heads from a `{type: "heads", heads: [[l, h], ...], value}`
 * message (buffers: raw, then value-weighted when `value`); returns the heads
 * filled (`layer * nHeads + head`). A message that does not fit is ignored:
 * the final traits arrive anyway.
 */
export function fillStreamedHeads(raw: Patterns, value: Patterns | null, content: unknown, buffers: unknown): number[] {
  const msg = content as { type?: unknown; heads?: unknown; value?: unknown } | null;
  if (msg?.type !== "heads" || !Array.isArray(msg.heads) || !Array.isArray(buffers)) return [];
  const perHead = msg.value === true ? 2 : 1;
  const filled: number[] = [];
  msg.heads.forEach((lh: unknown, i: number) => {
    if (!Array.isArray(lh)) return;
    const [layer, head] = lh as [number, number];
    const bytes = (k: number): Uint8Array | null => {
      const b = (buffers as unknown[])[i * perHead + k] as DataView | ArrayBuffer | undefined;
      if (b === undefined) return null;
      return b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
    try {
      const r = bytes(0);
      if (r !== null && raw.ready !== null && !headReady(raw, layer, head)) fillHead(raw, layer, head, r);
      const v = perHead === 2 ? bytes(1) : null;
      if (v !== null && value?.ready != null && !headReady(value, layer, head)) fillHead(value, layer, head, v);
    } catch {
      return;
    }
    filled.push(layer * raw.nHeads + head);
  });
  return filled;
}
