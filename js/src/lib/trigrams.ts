// Skip-trigram data as the view reads it: the decoded arrays, a head's rows,
// a source's profile ordered by the sum of ranks, sorting and token search.
// No DOM.

import type { NDArray } from "./arrays";
import { NONE } from "./selection";
import { type Direction, sortedOrder } from "./table";
import { tokenLabel } from "./tokens";

/** A source profile computed by the kernel (local token indices). */
export interface LiveProfile {
  layer: number;
  head: number;
  source: number;
  dest: number[];
  qk: number[];
  out: number[];
  ov: number[];
}

/** Origin bits of a row. */
export const ORIGIN_OV = 1;
export const ORIGIN_QK = 2;

export interface TrigramData {
  nLayers: number;
  nHeads: number;
  tokenIds: Int32Array;
  tokenStrs: string[];
  rows: Int32Array; // [L, H, R, 4]
  values: Float32Array; // [L, H, R, 2]
  R: number;
  profSources: Int32Array; // [L, H, S]
  profTokens: Int32Array; // [L, H, S, 2, P]
  profValues: Float32Array; // [L, H, S, 2, P]
  S: number;
  P: number;
  ready: Uint8Array; // [L, H]
  order: Int32Array; // [P², 2]: the kernel's canonical order of a source's (destination, out) rank pairs
}

/** One row of a listing: local token indices and the two scores. */
export interface Trigram {
  source: number;
  dest: number;
  out: number;
  qk: number;
  ov: number;
  origin: number;
}

function asInt32(a: NDArray, name: string): Int32Array {
  if (!(a.data instanceof Int32Array)) throw new Error(`circuitwidgets: ${name} must be int32`);
  return a.data;
}

function asFloat32(a: NDArray, name: string): Float32Array {
  if (!(a.data instanceof Float32Array)) throw new Error(`circuitwidgets: ${name} must be float32`);
  return a.data;
}

/** Check and wrap the decoded arrays. */
export function toTrigramData(
  tokenIds: NDArray,
  tokenStrs: string[],
  rows: NDArray,
  values: NDArray,
  profSources: NDArray,
  profTokens: NDArray,
  profValues: NDArray,
  ready: NDArray,
  order: NDArray,
): TrigramData {
  const [nLayers = 0, nHeads = 0, R = 0] = rows.shape;
  const S = profSources.shape[2] ?? 0;
  const P = profTokens.shape[4] ?? 0;
  if (tokenIds.shape[0] !== tokenStrs.length) throw new Error("circuitwidgets: token_ids and token_strs differ in length");
  if (rows.shape.length !== 4 || rows.shape[3] !== 4) throw new Error(`circuitwidgets: rows of shape [${rows.shape.join(", ")}] are not [L, H, R, 4]`);
  if (values.data.length !== nLayers * nHeads * R * 2) throw new Error("circuitwidgets: row_values do not match rows");
  if (profTokens.data.length !== nLayers * nHeads * S * 2 * P || profValues.data.length !== profTokens.data.length)
    throw new Error("circuitwidgets: profile arrays do not match");
  if (ready.data.length !== nLayers * nHeads) throw new Error("circuitwidgets: ready does not match rows");
  const T = tokenStrs.length;
  const ints = [asInt32(rows, "rows"), asInt32(profSources, "profile_sources"), asInt32(profTokens, "profile_tokens")];
  for (const arr of ints) for (const v of arr) if (v < -1 || v >= T) throw new Error("circuitwidgets: a token index is out of range");
  return {
    nLayers,
    nHeads,
    tokenIds: asInt32(tokenIds, "token_ids"),
    tokenStrs,
    rows: ints[0] as Int32Array,
    values: asFloat32(values, "row_values"),
    R,
    profSources: ints[1] as Int32Array,
    profTokens: ints[2] as Int32Array,
    profValues: asFloat32(profValues, "profile_values"),
    S,
    P,
    ready: ready.data as Uint8Array,
    order: asInt32(order, "profile_order"),
  };
}

/** Local index of global token id `id`, or -1. */
export function localIndex(d: TrigramData, id: number): number {
  return d.tokenIds.indexOf(id);
}

/** The head's largest skip-trigrams in canonical order (null when the head was not precomputed). */
export function headListing(d: TrigramData, l: number, h: number): Trigram[] | null {
  if (!d.ready[l * d.nHeads + h]) return null;
  const out: Trigram[] = [];
  const base = (l * d.nHeads + h) * d.R;
  for (let r = 0; r < d.R; r++) {
    const i = (base + r) * 4;
    const source = d.rows[i] as number;
    if (source < 0) continue;
    out.push({
      source,
      dest: d.rows[i + 1] as number,
      out: d.rows[i + 2] as number,
      origin: d.rows[i + 3] as number,
      qk: d.values[(base + r) * 2] as number,
      ov: d.values[(base + r) * 2 + 1] as number,
    });
  }
  return out;
}

/**
 * A source's destination × out triples in the kernel's canonical order
 * (`order`, pairs of ranks: the kernel defines it, so both sides list the same rows).
 */
export function sourceListing(
  source: number,
  dest: readonly number[],
  qk: readonly number[],
  out: readonly number[],
  ov: readonly number[],
  order: Int32Array,
): Trigram[] {
  const rows: Trigram[] = [];
  for (let k = 0; k + 1 < order.length; k += 2) {
    const i = order[k] as number;
    const j = order[k + 1] as number;
    if (i < dest.length && j < out.length)
      rows.push({ source, dest: dest[i] as number, out: out[j] as number, qk: qk[i] as number, ov: ov[j] as number, origin: 0 });
  }
  return rows;
}

/** Local indices of the sources precomputed for head (l, h). */
export function precomputedSources(d: TrigramData, l: number, h: number): number[] {
  if (!d.ready[l * d.nHeads + h]) return [];
  const base = (l * d.nHeads + h) * d.S;
  const out: number[] = [];
  for (let s = 0; s < d.S; s++) {
    const v = d.profSources[base + s] as number;
    if (v >= 0) out.push(v);
  }
  return out;
}

/** The precomputed profile of local source `src` at (l, h) as a listing, or null. */
export function profileListing(d: TrigramData, l: number, h: number, src: number): Trigram[] | null {
  if (!d.ready[l * d.nHeads + h]) return null;
  const base = (l * d.nHeads + h) * d.S;
  for (let s = 0; s < d.S; s++) {
    if (d.profSources[base + s] !== src) continue;
    const off = (base + s) * 2 * d.P;
    const dest = Array.from(d.profTokens.subarray(off, off + d.P));
    const out = Array.from(d.profTokens.subarray(off + d.P, off + 2 * d.P));
    const qk = Array.from(d.profValues.subarray(off, off + d.P));
    const ov = Array.from(d.profValues.subarray(off + d.P, off + 2 * d.P));
    return sourceListing(src, dest, qk, out, ov, d.order);
  }
  return null;
}

export type ListingState = "ok" | "head-missing" | "source-missing";

/**
 * What the table lists for head (l, h) and global source id `source` (-1 for
 * the head's largest): precomputed rows, the kernel's live profile, or the
 * reason there is nothing yet.
 */
export function currentListing(
  d: TrigramData,
  l: number,
  h: number,
  source: number,
  live: Partial<LiveProfile> | null | undefined,
): { state: ListingState; rows: Trigram[] } {
  if (source === NONE) {
    const rows = headListing(d, l, h);
    return rows === null ? { state: "head-missing", rows: [] } : { state: "ok", rows };
  }
  const src = localIndex(d, source);
  if (src >= 0) {
    const rows = profileListing(d, l, h, src);
    if (rows !== null) return { state: "ok", rows };
    if (live && live.layer === l && live.head === h && live.source === src && live.dest && live.qk && live.out && live.ov)
      return { state: "ok", rows: sourceListing(src, live.dest, live.qk, live.out, live.ov, d.order) };
  }
  return { state: "source-missing", rows: [] };
}

/** Sortable columns. */
export type SortKey = "rank" | "source" | "dest" | "out" | "qk" | "ov";

/** Canonical row indices in display order. */
export function sortListing(rows: readonly Trigram[], strs: readonly string[], key: SortKey, direction: Direction): number[] {
  if (key === "rank") return sortedOrder(rows.length, (i) => i, direction);
  if (key === "qk" || key === "ov") return sortedOrder(rows.length, (i) => (rows[i] as Trigram)[key], direction);
  return sortedOrder(rows.length, (i) => strs[(rows[i] as Trigram)[key]] ?? "", direction);
}

/** Find a token by what a user typed: its exact string or its visible form (· for space…). */
export function findToken(strs: readonly string[], candidates: readonly number[], query: string): number {
  for (const i of candidates) if (strs[i] === query) return i;
  for (const i of candidates) if (tokenLabel(strs[i] ?? "", Number.POSITIVE_INFINITY).text === query) return i;
  return NONE;
}

/** One head's slices as the kernel sends them when it computes the head on demand. */
export interface HeadSlices {
  rows: Int32Array; // [R, 4]
  values: Float32Array; // [R, 2]
  profSources: Int32Array; // [S]
  profTokens: Int32Array; // [S, 2, P]
  profValues: Float32Array; // [S, 2, P]
}

/**
 * What a live kernel sent since the view's state (`trigram_update` messages):
 * tokens after the state's vocabulary, and heads computed on demand. Only
 * these cross the wire; the state's arrays of every other head stay as they are.
 */
export interface TrigramUpdates {
  tokenIds: number[];
  tokenStrs: string[];
  heads: Map<string, HeadSlices>;
}

export function emptyUpdates(): TrigramUpdates {
  return { tokenIds: [], tokenStrs: [], heads: new Map() };
}

function bytesOf(buffer: unknown): Uint8Array | null {
  if (buffer instanceof ArrayBuffer) return new Uint8Array(buffer.slice(0));
  if (ArrayBuffer.isView(buffer)) return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength).slice();
  return null;
}

function typed<T extends Int32Array | Float32Array>(buffer: unknown, ctor: { new (b: ArrayBuffer): T }, length: number): T | null {
  const bytes = bytesOf(buffer);
  if (bytes === null || bytes.byteLength !== length * 4) return null;
  return new ctor(bytes.buffer as ArrayBuffer);
}

/**
 * Take one `trigram_update` message into `u` (checked against the state `base`);
 * false, and `u` unchanged, when it is not one or does not fit.
 */
export function takeUpdate(u: TrigramUpdates, base: TrigramData, content: unknown, buffers: readonly unknown[]): boolean {
  if (content === null || typeof content !== "object") return false;
  const c = content as Record<string, unknown>;
  if (c.type !== "trigram_update" || !Array.isArray(c.token_ids) || !Array.isArray(c.token_strs) || !Array.isArray(c.heads)) return false;
  const from = Number(c.tokens_from);
  const have = base.tokenStrs.length + u.tokenStrs.length;
  if (!Number.isInteger(from) || from > have || c.token_ids.length !== c.token_strs.length) return false;
  const T = Math.max(have, from + c.token_strs.length);
  const heads: [string, HeadSlices][] = [];
  const { R, S, P } = base;
  for (let i = 0; i < c.heads.length; i++) {
    const [l, h] = (c.heads[i] as unknown[]).map(Number) as [number, number];
    if (!(l >= 0 && l < base.nLayers && h >= 0 && h < base.nHeads)) return false;
    const at = buffers.slice(5 * i, 5 * i + 5);
    const slices = {
      rows: typed(at[0], Int32Array, R * 4),
      values: typed(at[1], Float32Array, R * 2),
      profSources: typed(at[2], Int32Array, S),
      profTokens: typed(at[3], Int32Array, S * 2 * P),
      profValues: typed(at[4], Float32Array, S * 2 * P),
    };
    if (Object.values(slices).some((s) => s === null)) return false;
    const ok = slices as HeadSlices;
    for (const arr of [ok.profSources, ok.profTokens]) for (const v of arr) if (v < -1 || v >= T) return false;
    for (let r = 0; r < R; r++) for (let k = 0; k < 3; k++) if ((ok.rows[r * 4 + k] as number) < -1 || (ok.rows[r * 4 + k] as number) >= T) return false;
    heads.push([`${l}.${h}`, ok]);
  }
  // (a reply to "want_trigram_update" repeats tokens the view has: keep only the new ones)
  const skip = have - from;
  u.tokenIds.push(...(c.token_ids as unknown[]).slice(skip).map(Number));
  u.tokenStrs.push(...(c.token_strs as unknown[]).slice(skip).map(String));
  for (const [key, slices] of heads) u.heads.set(key, slices);
  return true;
}

/** `base` with `u` applied: the vocabulary extended, computed heads in place and marked ready. */
export function withUpdates(base: TrigramData, u: TrigramUpdates): TrigramData {
  if (u.tokenStrs.length === 0 && u.heads.size === 0) return base;
  const d: TrigramData = {
    ...base,
    tokenIds: Int32Array.from([...base.tokenIds, ...u.tokenIds]),
    tokenStrs: [...base.tokenStrs, ...u.tokenStrs],
  };
  if (u.heads.size > 0) {
    d.rows = base.rows.slice();
    d.values = base.values.slice();
    d.profSources = base.profSources.slice();
    d.profTokens = base.profTokens.slice();
    d.profValues = base.profValues.slice();
    d.ready = base.ready.slice();
    for (const [key, s] of u.heads) {
      const [l, h] = key.split(".").map(Number) as [number, number];
      const k = l * base.nHeads + h;
      d.rows.set(s.rows, k * base.R * 4);
      d.values.set(s.values, k * base.R * 2);
      d.profSources.set(s.profSources, k * base.S);
      d.profTokens.set(s.profTokens, k * base.S * 2 * base.P);
      d.profValues.set(s.profValues, k * base.S * 2 * base.P);
      d.ready[k] = 1;
    }
  }
  return d;
}
