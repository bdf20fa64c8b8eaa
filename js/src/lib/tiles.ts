// Long-context attention: tiles of the pattern requested from the kernel.
//
// The kernel (circuitwidgets/widgets/attention/tiles.py) holds queries and
// keys, never the N × N pattern. The view has an overview of every head (block
// max and mean over `block` × `block` tokens) and asks for finer tiles as it
// zooms: a tile at `level` has `tileSize` × `tileSize` cells of 2^level tokens
// a side (level 0: single weights). Messages:
//   view → kernel {type: "tile", id, layer, head, level, row, col, kind}
//                 {type: "cancel", ids: [...]}
//   kernel → view {type: "tile", id, layer, head, level, row, col, kind, rows, cols} + [max, mean] float32
// `kind` is "raw" (the weights) or "value" (the value-weighted pattern, when
// the kernel has value norms); a missing kind is "raw".
//                 {type: "tile_error", id, message}
// Pure logic (which tiles a viewport needs, the cache, requests in flight),
// so that request / cancel / cache are tested without a browser.

import type { Viewport } from "./viewport";

export interface TileGrid {
  /** Tokens. */
  n: number;
  /** Cells along a tile's side. */
  tileSize: number;
  /** Tokens per overview block (a power of two). */
  block: number;
}

/** Which pattern a tile or overview holds. */
export type TileKind = "raw" | "value";

export interface TileKey {
  layer: number;
  head: number;
  level: number;
  row: number;
  col: number;
  /** Absent: "raw". */
  kind?: TileKind;
}

export interface Tile extends TileKey {
  rows: number;
  cols: number;
  max: Float32Array;
  mean: Float32Array;
}

/** Finest level the kernel serves (coarser is the overview). */
export function maxLevel(grid: TileGrid): number {
  return Math.max(0, Math.round(Math.log2(grid.block)) - 1);
}

/**
 * The level a viewport of `view.size` tokens drawn over `px` device pixels
 * needs: blocks of at most one pixel (2^level ≥ tokens per pixel, smallest
 * such); `null` when the overview is fine enough.
 */
export function levelFor(viewSize: number, px: number, grid: TileGrid): number | null {
  const perPx = viewSize / Math.max(1, px);
  const level = Math.max(0, Math.ceil(Math.log2(Math.max(1, perPx)) - 1e-9));
  if (2 ** level >= grid.block) return null;
  return Math.min(level, maxLevel(grid));
}

/** Tokens covered by one tile's side at `level`. */
export function tileSpan(level: number, grid: TileGrid): number {
  return grid.tileSize * 2 ** level;
}

/** Tiles of `level` covering the viewport, nearest the centre first. */
export function tilesFor(view: Viewport, level: number, grid: TileGrid): { row: number; col: number }[] {
  const span = tileSpan(level, grid);
  const last = Math.max(0, Math.ceil(grid.n / span) - 1);
  const clamp = (v: number) => Math.max(0, Math.min(last, v));
  const r0 = clamp(Math.floor(view.r0 / span));
  const r1 = clamp(Math.floor((view.r0 + view.size - 1) / span));
  const c0 = clamp(Math.floor(view.c0 / span));
  const c1 = clamp(Math.floor((view.c0 + view.size - 1) / span));
  const out: { row: number; col: number }[] = [];
  for (let row = r0; row <= r1; row++) for (let col = c0; col <= c1; col++) out.push({ row, col });
  const cr = (view.r0 + view.size / 2) / span - 0.5;
  const cc = (view.c0 + view.size / 2) / span - 0.5;
  return out.sort((a, b) => Math.hypot(a.row - cr, a.col - cc) - Math.hypot(b.row - cr, b.col - cc));
}

/** Whether a causal pattern's tile lies wholly above the diagonal (nothing to ask for). */
export function maskedTile(key: TileKey, grid: TileGrid, causal: boolean): boolean {
  const span = tileSpan(key.level, grid);
  return causal && key.col * span > Math.min(grid.n, (key.row + 1) * span) - 1;
}

/** A cache key. */
export function keyOf(k: TileKey): string {
  return `${k.kind ?? "raw"}.${k.layer}.${k.head}.${k.level}.${k.row}.${k.col}`;
}

export type Send = (message: Record<string, unknown>) => void;

/**
 * Tiles received (least recently used dropped beyond `capacity`) and tiles
 * asked for. `want` asks for what is missing and cancels what is no longer
 * wanted, so that scrolling away does not leave the kernel working for
 * nothing.
 */
export class TileStore {
  private readonly cache = new Map<string, Tile>();
  private readonly inflight = new Map<string, number>();
  private nextId = 0;
  /** The last error the kernel sent (shown by the view). */
  lastError: string | null = null;

  constructor(
    private readonly send: Send,
    private readonly capacity = 512,
  ) {}

  /** A cached tile (marked as recently used), or undefined. */
  get(k: TileKey): Tile | undefined {
    const key = keyOf(k);
    const tile = this.cache.get(key);
    if (tile !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, tile);
    }
    return tile;
  }

  /** Whether a tile is cached (without touching its recency). */
  has(k: TileKey): boolean {
    return this.cache.has(keyOf(k));
  }

  /** Requests in flight. */
  get pending(): number {
    return this.inflight.size;
  }

  /** Tiles cached. */
  get size(): number {
    return this.cache.size;
  }

  /** Ask for the tiles of `keys` not cached nor in flight; cancel those in flight that are not among them. */
  want(keys: readonly TileKey[]): number[] {
    const wanted = new Set(keys.map(keyOf));
    const cancel: number[] = [];
    for (const [key, id] of this.inflight) {
      if (!wanted.has(key)) {
        cancel.push(id);
        this.inflight.delete(key);
      }
    }
    if (cancel.length > 0) this.send({ type: "cancel", ids: cancel });
    const asked: number[] = [];
    for (const k of keys) {
      const key = keyOf(k);
      if (this.cache.has(key) || this.inflight.has(key)) continue;
      const id = this.nextId++;
      this.inflight.set(key, id);
      asked.push(id);
      this.send({ type: "tile", id, layer: k.layer, head: k.head, level: k.level, row: k.row, col: k.col, kind: k.kind ?? "raw" });
    }
    return asked;
  }

  /**
   * A `tile` or `tile_error` message from the kernel: store the tile (checked
   * against its header) and return it; null for an error, a stale or a
   * malformed message.
   */
  receive(content: unknown, buffers: readonly unknown[]): Tile | null {
    const msg = content as Record<string, unknown> | null;
    if (msg === null || typeof msg !== "object") return null;
    if (msg.type === "tile_error") {
      this.lastError = typeof msg.message === "string" ? msg.message : "tile request refused";
      for (const [key, id] of this.inflight) if (id === msg.id) this.inflight.delete(key);
      return null;
    }
    if (msg.type !== "tile") return null;
    const ints = ["layer", "head", "level", "row", "col", "rows", "cols"].map((f) => msg[f]);
    if (!ints.every((v) => Number.isInteger(v) && (v as number) >= 0)) return null;
    const [layer, head, level, row, col, rows, cols] = ints as number[];
    const kind = msg.kind ?? "raw";
    if (kind !== "raw" && kind !== "value") return null;
    const key = keyOf({ layer, head, level, row, col, kind } as TileKey);
    if (this.inflight.get(key) !== msg.id) return null; // cancelled or never asked
    this.inflight.delete(key);
    const max = asFloat32(buffers[0]);
    const mean = asFloat32(buffers[1]);
    const cells = (rows as number) * (cols as number);
    if (max === null || mean === null || max.length !== cells || mean.length !== cells) return null;
    const tile: Tile = { layer, head, level, row, col, kind, rows, cols, max, mean } as Tile;
    this.cache.set(key, tile);
    while (this.cache.size > this.capacity) {
      const oldest = this.cache.keys().next().value as string;
      this.cache.delete(oldest);
    }
    this.lastError = null;
    return tile;
  }
}

/** Bytes from a message buffer as float32 (copied when misaligned); null when not bytes. */
export function asFloat32(b: unknown): Float32Array | null {
  let bytes: Uint8Array;
  if (b instanceof ArrayBuffer) bytes = new Uint8Array(b);
  else if (ArrayBuffer.isView(b)) bytes = new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, b.byteLength);
  else return null;
  if (bytes.byteLength % 4 !== 0) return null;
  if (bytes.byteOffset % 4 !== 0) bytes = bytes.slice();
  return new Float32Array(bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength / 4);
}

/** What the view knows of one head: its overview (max, `grid × grid`) and the tile cache. */
export interface HeadView {
  layer: number;
  head: number;
  /** Absent: "raw". */
  kind?: TileKind;
  /** Overview block max, `g × g` row-major (g = ceil(n / block)); null while not yet summarised. */
  overview: Float32Array | null;
}

/**
 * The block max of the finest data known for token cell (`r`, `c`): a cached
 * tile from `finest` up to `maxLevel`, else the overview; with the block size
 * it stands for. NaN when nothing is known.
 */
export function valueAt(
  store: TileStore,
  head: HeadView,
  grid: TileGrid,
  finest: number,
  r: number,
  c: number,
): { value: number; block: number } {
  for (let level = finest; level <= maxLevel(grid) && 2 ** level < grid.block; level++) {
    const span = tileSpan(level, grid);
    const row = Math.floor(r / span);
    const col = Math.floor(c / span);
    const key: TileKey = { layer: head.layer, head: head.head, level, row, col, kind: head.kind ?? "raw" };
    const tile = store.has(key) ? store.get(key) : undefined;
    if (tile !== undefined) {
      const i = Math.floor((r - row * span) / 2 ** level);
      const j = Math.floor((c - col * span) / 2 ** level);
      return { value: tile.max[i * tile.cols + j] as number, block: 2 ** level };
    }
  }
  if (head.overview === null) return { value: Number.NaN, block: grid.block };
  const g = Math.ceil(grid.n / grid.block);
  return { value: head.overview[Math.floor(r / grid.block) * g + Math.floor(c / grid.block)] as number, block: grid.block };
}

/**
 * The viewport resampled to at most `maxPx` cells a side: each cell the
 * finest known block max at its centre token (NaN: unknown, -1: masked above
 * a causal diagonal).
 */
export function viewCells(
  store: TileStore,
  head: HeadView,
  grid: TileGrid,
  view: Viewport,
  maxPx: number,
  causal: boolean,
): { rows: number; values: Float32Array } {
  const rows = Math.max(1, Math.min(view.size, Math.floor(maxPx)));
  const finest = levelFor(view.size, maxPx, grid) ?? maxLevel(grid) + 1;
  const values = new Float32Array(rows * rows);
  const at = (k: number, start: number) => start + Math.floor(((k + 0.5) * view.size) / rows);
  for (let i = 0; i < rows; i++) {
    const r = at(i, view.r0);
    for (let j = 0; j < rows; j++) {
      const c = at(j, view.c0);
      // a cell is masked only when the whole token range it stands for lies above the diagonal
      if (causal && view.c0 + Math.floor((j * view.size) / rows) > view.r0 + Math.floor(((i + 1) * view.size) / rows) - 1) {
        values[i * rows + j] = -1;
        continue;
      }
      values[i * rows + j] = valueAt(store, head, grid, finest, r, c).value;
    }
  }
  return { rows, values };
}

/** The tokens the strip shows as DOM nodes: at most `limit`, around the viewport's rows (and the selection). */
export function tokenWindow(view: Viewport, n: number, limit: number, focus = -1): { start: number; end: number } {
  let start = view.r0;
  let end = Math.min(n, view.r0 + view.size);
  if (end - start > limit) {
    const centre = focus >= start && focus < end ? focus : start + Math.floor((end - start) / 2);
    start = Math.max(0, Math.min(n - limit, centre - Math.floor(limit / 2)));
    end = Math.min(n, start + limit);
  }
  return { start, end };
}
