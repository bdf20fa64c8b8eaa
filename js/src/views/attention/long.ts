// Long contexts (AttentionPatterns.from_qk): the kernel holds queries and
// keys; the view has each head's overview (block max, exact as an aggregate)
// and asks for finer tiles as it zooms (lib/tiles.ts). In an exported page
// there is no kernel: the overview and each row's top-k sources (traits
// `top_sources`, `top_weights`) are all there is, and the view says so.
// With value norms the kernel summarises the value-weighted pattern in the
// same pass: the overview has four channels (raw max, mean; value max, mean)
// and `withKind("value")` is the same source drawing that pattern.

import { decodeOptional, float16ToFloat32, type WireArray } from "../../lib/arrays";
import type { ColourScale } from "../../lib/attentionui";
import type { CellSource } from "../../lib/heatmap";
import {
  type HeadView,
  levelFor,
  maskedTile,
  maxLevel,
  type Send,
  type TileGrid,
  type TileKind,
  TileStore,
  tilesFor,
  valueAt,
  viewCells,
} from "../../lib/tiles";
import type { Viewport } from "../../lib/viewport";
import type { PatternSource, Weight } from "./source";

/** A value in [0, 1] (or -1 / NaN) to a LUT index under `scale`, `rowMax` the row's largest value. */
export function longIndex(v: number, scale: ColourScale, rowMax: number): number {
  if (!(v >= 0)) return -1;
  const x = scale === "row" ? (rowMax > 0 ? v / rowMax : 0) : scale === "gamma" ? Math.sqrt(v) : v;
  return Math.min(255, Math.round(255 * x));
}

export class LongSource implements PatternSource {
  readonly nLayers: number;
  readonly nHeads: number;
  readonly nTokens: number;
  readonly causal: boolean;
  readonly grid: TileGrid;
  readonly store: TileStore;
  /** The pattern this source draws (`withKind` shares everything else). */
  readonly kind: TileKind = "raw";
  /** Patterns the kernel summarises: raw, and value-weighted when it has value norms. */
  readonly kinds: TileKind[];
  /** Per kind, per head (`layer * nHeads + head`): overview block max, `g × g` (NaN: rows still to come), or null before any row. */
  private readonly overviews: Record<TileKind, (Float32Array | null)[]>;
  /** Per head: 1 once every overview row has arrived. */
  private readonly done: Uint8Array;
  private readonly topSources: Int32Array | null;
  private readonly topWeights: Float32Array | null;
  readonly topK: number;

  constructor(
    shape: { nLayers: number; nHeads: number; nTokens: number; causal: boolean; block: number; tileSize: number },
    overview: WireArray | null,
    topSources: WireArray | null,
    topWeights: WireArray | null,
    send: Send,
    readonly offline: boolean,
    previous: LongSource | null = null,
  ) {
    this.nLayers = shape.nLayers;
    this.nHeads = shape.nHeads;
    this.nTokens = shape.nTokens;
    this.causal = shape.causal;
    this.grid = { n: shape.nTokens, tileSize: shape.tileSize, block: shape.block };
    // the same matrix again (its overview just committed): keep the tiles received and asked for
    const same =
      previous !== null &&
      previous.nTokens === this.nTokens &&
      previous.nLayers === this.nLayers &&
      previous.nHeads === this.nHeads &&
      previous.grid.block === this.grid.block &&
      previous.grid.tileSize === this.grid.tileSize;
    this.store = same ? previous.store : new TileStore(send);
    const g = this.side();
    const heads = this.nLayers * this.nHeads;
    const o = decodeOptional(overview);
    this.kinds = o !== null && o.shape.length === 5 && o.shape[2] === 4 ? ["raw", "value"] : ["raw"];
    this.overviews = { raw: new Array(heads).fill(null), value: new Array(heads).fill(null) };
    this.done = new Uint8Array(heads);
    const channels = 2 * this.kinds.length;
    if (o !== null && o.shape.length === 5 && o.shape[3] === g && o.shape[4] === g && o.data instanceof Float32Array) {
      const data = o.data;
      this.kinds.forEach((kind, c) => {
        for (let i = 0; i < heads; i++) this.overviews[kind][i] = data.subarray((i * channels + 2 * c) * g * g, (i * channels + 2 * c + 1) * g * g);
      });
      this.done.fill(1);
    } else if (same) {
      for (const kind of this.kinds) for (let i = 0; i < heads; i++) this.overviews[kind][i] = previous.overviews[kind][i] ?? null; // streamed so far
      this.done.set(previous.done);
    }
    const s = decodeOptional(topSources);
    const w = decodeOptional(topWeights);
    const k = s?.shape[3] ?? 0;
    const fits = s !== null && w !== null && s.data.length === this.nLayers * this.nHeads * this.nTokens * k && w.data.length === s.data.length;
    this.topSources = fits && s.data instanceof Int32Array ? s.data : null;
    this.topWeights = fits && w.data instanceof Float32Array ? w.data : null;
    this.topK = this.topSources === null ? 0 : k;
  }

  /** Overview cells a side. */
  side(): number {
    return Math.ceil(this.grid.n / this.grid.block);
  }

  /** The same data drawing the `kind` pattern (null when the kernel has no value norms). */
  withKind(kind: TileKind): LongSource | null {
    if (!this.kinds.includes(kind)) return null;
    // every field is shared by reference (the overviews filled as bands arrive, the tile store): only the kind differs
    return Object.assign(Object.create(LongSource.prototype) as LongSource, this, { kind });
  }

  private headView(layer: number, head: number): HeadView {
    return { layer, head, kind: this.kind, overview: this.overviews[this.kind][layer * this.nHeads + head] ?? null };
  }

  ready(layer: number, head: number): boolean {
    return this.overviews[this.kind][layer * this.nHeads + head] != null;
  }

  complete(layer: number, head: number): boolean {
    return this.done[layer * this.nHeads + head] === 1;
  }

  readyCount(): number {
    return this.done.reduce((a, b) => a + b, 0);
  }

  /**
   * An `overview` message: whole heads (one float16 buffer `[C, g, g]` each, C = 2 per kind), or
   * a band of one head's finished rows (`rows: [i0, i1]`, one buffer `[C, i1 - i0, g]`,
   * `done` on its last band). Returns the heads filled; a message that does not fit is ignored.
   */
  receiveOverview(content: unknown, buffers: unknown): number[] {
    const msg = content as { type?: unknown; heads?: unknown; rows?: unknown; done?: unknown } | null;
    if (msg?.type !== "overview" || !Array.isArray(msg.heads) || !Array.isArray(buffers)) return [];
    if (msg.rows !== undefined) return this.receiveBand(msg.heads[0], msg.rows, msg.done === true, buffers[0]);
    const g = this.side();
    const filled: number[] = [];
    msg.heads.forEach((lh: unknown, i: number) => {
      if (!Array.isArray(lh)) return;
      const [layer, head] = lh as [number, number];
      const b = (buffers as unknown[])[i];
      if (!(b instanceof ArrayBuffer || ArrayBuffer.isView(b))) return;
      const bytes = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, b.byteLength);
      if (bytes.byteLength !== 2 * 2 * this.kinds.length * g * g || !(layer >= 0 && layer < this.nLayers && head >= 0 && head < this.nHeads)) return;
      const bits = new Uint16Array(bytes.slice().buffer);
      this.kinds.forEach((kind, c) => {
        this.overviews[kind][layer * this.nHeads + head] = float16ToFloat32(bits.subarray(2 * c * g * g, (2 * c + 1) * g * g));
      });
      this.done[layer * this.nHeads + head] = 1;
      filled.push(layer * this.nHeads + head);
    });
    return filled;
  }

  private receiveBand(lh: unknown, rows: unknown, last: boolean, buffer: unknown): number[] {
    const g = this.side();
    if (!Array.isArray(lh) || !Array.isArray(rows)) return [];
    const [layer, head] = lh as [number, number];
    const [i0, i1] = rows as [number, number];
    const fits =
      Number.isInteger(layer) && Number.isInteger(head) && layer >= 0 && layer < this.nLayers && head >= 0 && head < this.nHeads &&
      Number.isInteger(i0) && Number.isInteger(i1) && 0 <= i0 && i0 <= i1 && i1 <= g;
    if (!fits || !(buffer instanceof ArrayBuffer || ArrayBuffer.isView(buffer))) return [];
    const bytes = buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : new Uint8Array(buffer.buffer as ArrayBuffer, buffer.byteOffset, buffer.byteLength);
    const cells = (i1 - i0) * g;
    const i = layer * this.nHeads + head;
    if (bytes.byteLength !== 2 * 2 * this.kinds.length * cells || this.done[i] === 1) return [];
    this.kinds.forEach((kind, c) => {
      let o = this.overviews[kind][i];
      if (o == null) o = this.overviews[kind][i] = new Float32Array(g * g).fill(Number.NaN);
      if (cells > 0) o.set(float16ToFloat32(new Uint16Array(bytes.slice(2 * 2 * c * cells, 2 * (2 * c + 1) * cells).buffer)), i0 * g);
    });
    if (last) this.done[i] = 1;
    return [i];
  }

  /** Ask the kernel for the tiles the viewport needs (nothing offline or when the overview is fine enough). */
  need(layer: number, head: number, view: Viewport, px: number): void {
    if (this.offline) return;
    const level = levelFor(view.size, px, this.grid);
    const keys = level === null ? [] : tilesFor(view, level, this.grid).map((t) => ({ layer, head, level, kind: this.kind, ...t }));
    this.store.want(keys.filter((k) => !maskedTile(k, this.grid, this.causal)));
  }

  /** Whether the view is finer than what an exported page holds (the overview; top-k per row). */
  finerThanExport(view: Viewport, px: number): boolean {
    return this.offline && levelFor(view.size, px, this.grid) !== null;
  }

  cells(layer: number, head: number, view: Viewport, maxPx: number, scale: ColourScale): CellSource {
    const hv = this.headView(layer, head);
    const { rows, values } =
      this.finerThanExport(view, maxPx) && this.topSources !== null && this.kind === "raw"
        ? this.topCells(layer, head, view, maxPx)
        : viewCells(this.store, hv, this.grid, view, maxPx, this.causal);
    const rowMax = new Float32Array(rows);
    if (scale === "row") {
      const g = this.side();
      for (let i = 0; i < rows; i++) {
        const r = view.r0 + Math.floor(((i + 0.5) * view.size) / rows);
        let m = 0;
        const o = hv.overview;
        if (o !== null) for (let c = 0; c < g; c++) m = Math.max(m, o[Math.floor(r / this.grid.block) * g + c] as number);
        rowMax[i] = m;
      }
    }
    return { rows, cols: rows, index: (r, c) => longIndex(values[r * rows + c] as number, scale, rowMax[r] as number) };
  }

  /** Offline at fine zoom: each row's top-k sources at full resolution (max per pixel), unknown elsewhere. */
  private topCells(layer: number, head: number, view: Viewport, maxPx: number): { rows: number; values: Float32Array } {
    const rows = Math.max(1, Math.min(view.size, Math.floor(maxPx)));
    const values = new Float32Array(rows * rows).fill(Number.NaN);
    const k = this.topK;
    const src = this.topSources as Int32Array;
    const w = this.topWeights as Float32Array;
    const base = (layer * this.nHeads + head) * this.nTokens * k;
    for (let r = view.r0; r < Math.min(this.nTokens, view.r0 + view.size); r++) {
      const i = Math.floor(((r - view.r0) * rows) / view.size);
      for (let t = 0; t < k; t++) {
        const s = src[base + r * k + t] as number;
        if (s < view.c0 || s >= view.c0 + view.size) continue;
        const j = Math.floor(((s - view.c0) * rows) / view.size);
        const v = w[base + r * k + t] as number;
        const cur = values[i * rows + j] as number;
        if (!(cur >= v)) values[i * rows + j] = v;
      }
    }
    return { rows, values };
  }

  /** The top-k weight of (dest, src) when src is among dest's top-k sources, else NaN. */
  private topWeight(layer: number, head: number, dest: number, src: number): number {
    if (this.topSources === null || this.topWeights === null || this.kind !== "raw") return Number.NaN; // (the raw pattern's)
    const base = ((layer * this.nHeads + head) * this.nTokens + dest) * this.topK;
    for (let t = 0; t < this.topK; t++) if (this.topSources[base + t] === src) return this.topWeights[base + t] as number;
    return Number.NaN;
  }

  weight(layer: number, head: number, dest: number, src: number): Weight {
    if (this.causal && src > dest) return { value: -1, exact: true, block: 1 };
    const known = valueAt(this.store, this.headView(layer, head), this.grid, 0, dest, src);
    if (known.block === 1) return { value: known.value, exact: true, block: 1 };
    const top = this.topWeight(layer, head, dest, src);
    if (!Number.isNaN(top)) return { value: top, exact: true, block: 1 };
    return { value: known.value, exact: false, block: known.block };
  }

  row(layer: number, head: number, dest: number, start: number, end: number): Float32Array | null {
    if (!this.ready(layer, head)) return null;
    const out = new Float32Array(Math.max(0, end - start));
    for (let c = start; c < end; c++) out[c - start] = this.weight(layer, head, dest, c).value;
    return out;
  }

  column(layer: number, head: number, src: number, start: number, end: number): Float32Array | null {
    if (!this.ready(layer, head)) return null;
    const out = new Float32Array(Math.max(0, end - start));
    for (let r = start; r < end; r++) out[r - start] = this.weight(layer, head, r, src).value;
    return out;
  }

  /** The finest level the kernel serves (for words). */
  finestLevel(): number {
    return maxLevel(this.grid);
  }
}
