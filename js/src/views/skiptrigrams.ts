// SkipTrigramTable view: a head's largest skip-trigrams [source] … [destination]
// → [out], sortable and paged, with a search box for other source tokens.
//
// Kernel → view: token_ids/token_strs (the local vocabulary), rows,
// row_values, profile_* (precomputed sources), ready, live (a source computed
// on demand), source_message. View → kernel: selected_layer, selected_head,
// source_token, source_query (text for the kernel to resolve), selected_row.
//
// With no kernel (`__offline__`), the precomputed rows and sources stay
// browsable and the view says plainly that other tokens need a live kernel.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../lib/arrays";
import { DIVERGING, divergingIndex, lutCss, lutLuminance } from "../lib/colour";
import { el, ensureStyle, listen } from "../lib/dom";
import { makePanel, setTitle } from "../lib/panel";
import { indexOr, NONE, onTraits, perFrame, setTraits } from "../lib/selection";
import { fmt, headName } from "../lib/svg";
import { type Direction, pageCount, pageOf, pageSlice, sortedOrder } from "../lib/table";
import { setTokenText, tokenLabel } from "../lib/tokens";
import CSS from "../styles/skiptrigrams.css";

export interface TrigramTraits {
  [key: string]: unknown;
  model_name: string;
  token_ids: WireArray;
  token_strs: string[];
  rows: WireArray;
  row_values: WireArray;
  profile_sources: WireArray;
  profile_tokens: WireArray;
  profile_values: WireArray;
  ready: WireArray;
  k: number;
  profile_k: number;
  d_vocab: number;
  live: LiveProfile | Record<string, never>;
  source_message: string;
  selected_layer: number;
  selected_head: number;
  source_token: number;
  source_query: string;
  selected_row: number;
}

type Model = AnyModel<TrigramTraits>;

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

/** All destination × out triples of one source, ordered by the sum of the two ranks, then destination rank. */
export function sourceListing(source: number, dest: readonly number[], qk: readonly number[], out: readonly number[], ov: readonly number[]): Trigram[] {
  const pairs: [number, number][] = [];
  for (let i = 0; i < dest.length; i++) for (let j = 0; j < out.length; j++) pairs.push([i, j]);
  pairs.sort((a, b) => a[0] + a[1] - (b[0] + b[1]) || a[0] - b[0]);
  return pairs.map(([i, j]) => ({ source, dest: dest[i] as number, out: out[j] as number, qk: qk[i] as number, ov: ov[j] as number, origin: 0 }));
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
    return sourceListing(src, dest, qk, out, ov);
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
      return { state: "ok", rows: sourceListing(src, live.dest, live.qk, live.out, live.ov) };
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


const PAGE_SIZES = [12, 25, 50];

export function renderSkipTrigrams({ model, el: root }: RenderProps<TrigramTraits>): () => void {
  const doc = root.ownerDocument;
  ensureStyle(doc, "cw-trigrams-style", CSS);
  const m = model as Model;
  const panel = makePanel(root, "skiptrigrams", "cw-trigrams", () => headLabel());
  const cleanups: (() => void)[] = [];
  const offline = m.get("__offline__" as never) === true;

  let data: TrigramData | null = null;
  let sortKey: SortKey = "rank";
  let sortDir: Direction = "asc";
  let page = 0;
  let pageSize = PAGE_SIZES[0] as number;
  let localMessage = "";
  let lastListingKey = "";

  // controls
  const headSelect = el(doc, "select");
  headSelect.title = "Head";
  const headLabelEl = el(doc, "label", undefined, "Head ");
  headLabelEl.append(headSelect);
  const search = el(doc, "span", "cw-search");
  const input = el(doc, "input");
  input.type = "search";
  input.placeholder = "source token…";
  input.setAttribute("aria-label", "Source token");
  input.spellcheck = false;
  const listId = `cw-trigram-sources-${Math.random().toString(36).slice(2)}`;
  const datalist = el(doc, "datalist");
  datalist.id = listId;
  input.setAttribute("list", listId);
  const showButton = el(doc, "button", "cw-button", "Show");
  showButton.type = "button";
  const allButton = el(doc, "button", "cw-button", "Largest");
  allButton.type = "button";
  allButton.title = "The head's largest skip-trigrams (all sources)";
  search.append(doc.createTextNode("Source "), input, datalist, showButton, allButton);
  const sizeSelect = el(doc, "select");
  for (const s of PAGE_SIZES) sizeSelect.append(el(doc, "option", undefined, String(s)));
  const sizeLabel = el(doc, "label", undefined, "Rows per page ");
  sizeLabel.append(sizeSelect);
  panel.controls.append(headLabelEl, search, sizeLabel);

  const message = el(doc, "div", "cw-message");
  const caption = el(doc, "div", "cw-note");
  const table = el(doc, "table");
  const thead = el(doc, "thead");
  const tbody = el(doc, "tbody");
  table.append(thead, tbody);
  const pager = el(doc, "div", "cw-pager");
  const prev = el(doc, "button", "cw-button cw-small", "‹ Prev");
  prev.type = "button";
  const next = el(doc, "button", "cw-button cw-small", "Next ›");
  next.type = "button";
  const pageText = el(doc, "span");
  pager.append(prev, pageText, next);
  const legend = el(doc, "div", "cw-note");
  panel.body.append(message, caption, table, pager, legend);

  const COLUMNS: { key: SortKey | null; label: string; title: string; num?: boolean }[] = [
    { key: "rank", label: "#", title: "canonical order" },
    { key: "source", label: "source", title: "the token attended to" },
    { key: null, label: "", title: "" },
    { key: "dest", label: "destination", title: "the token attending (the query)" },
    { key: null, label: "", title: "" },
    { key: "out", label: "out", title: "the token whose logit rises" },
    { key: "qk", label: "QK", title: "attention score of destination on source (W_E W_QK W_Eᵀ / scale)", num: true },
    { key: "ov", label: "OV", title: "direct logit effect on out of attending to source (W_E W_OV W_U)", num: true },
    { key: null, label: "", title: "" },
  ];

  function selection(d: TrigramData): { layer: number; head: number; source: number; row: number } {
    return {
      layer: indexOr(m.get("selected_layer"), d.nLayers, 0),
      head: indexOr(m.get("selected_head"), d.nHeads, 0),
      source: typeof m.get("source_token") === "number" ? (m.get("source_token") as number) : NONE,
      row: typeof m.get("selected_row") === "number" ? (m.get("selected_row") as number) : NONE,
    };
  }

  function headLabel(): string {
    return data === null ? "" : headName(selection(data).layer, selection(data).head);
  }

  function load(): void {
    try {
      data = toTrigramData(
        decodeArray(m.get("token_ids")),
        (m.get("token_strs") ?? []).map(String),
        decodeArray(m.get("rows")),
        decodeArray(m.get("row_values")),
        decodeArray(m.get("profile_sources")),
        decodeArray(m.get("profile_tokens")),
        decodeArray(m.get("profile_values")),
        decodeArray(m.get("ready")),
      );
    } catch (err) {
      data = null;
      tbody.replaceChildren();
      panel.status.textContent = err instanceof Error ? err.message : String(err);
      panel.status.classList.add("cw-error");
      return;
    }
    panel.status.classList.remove("cw-error");
    const options: HTMLOptionElement[] = [];
    for (let l = 0; l < data.nLayers; l++)
      for (let h = 0; h < data.nHeads; h++) {
        const o = el(doc, "option", undefined, headName(l, h) + (data.ready[l * data.nHeads + h] ? "" : offline ? " (not stored)" : " (computed on demand)"));
        o.value = `${l}.${h}`;
        options.push(o);
      }
    headSelect.replaceChildren(...options);
  }

  function tokenCell(i: number, className = "cw-tok"): HTMLSpanElement {
    const span = el(doc, "span", className);
    setTokenText(span, data?.tokenStrs[i] ?? "", 28);
    return span;
  }

  function buildHead(): void {
    const tr = el(doc, "tr");
    for (const c of COLUMNS) {
      const th = el(doc, "th", c.num ? "cw-num" : undefined, c.label);
      if (c.title) th.title = c.title;
      if (c.key) {
        th.dataset.sort = c.key;
        if (c.key === sortKey) th.textContent = `${c.label} ${sortDir === "asc" ? "▲" : "▼"}`;
      }
      tr.append(th);
    }
    thead.replaceChildren(tr);
  }

  function valueCell(v: number, limit: number): HTMLTableCellElement {
    const td = el(doc, "td", "cw-num", fmt(v, 2));
    const idx = divergingIndex(v, limit);
    td.style.backgroundColor = lutCss(DIVERGING, idx);
    td.style.color = lutLuminance(DIVERGING, idx) > 0.3 ? "#111" : "#fff";
    return td;
  }

  function describeRow(t: Trigram): string {
    const s = (i: number) => `“${tokenLabel(data?.tokenStrs[i] ?? "", 20).text}”`;
    return `${s(t.source)} … ${s(t.dest)} → ${s(t.out)}`;
  }

  function draw(): void {
    const d = data;
    if (d === null) return;
    const sel = selection(d);
    headSelect.value = `${sel.layer}.${sel.head}`;
    sizeSelect.value = String(pageSize);
    const live = m.get("live") as Partial<LiveProfile> | undefined;
    const { state, rows } = currentListing(d, sel.layer, sel.head, sel.source, live);
    const key = `${sel.layer}.${sel.head}.${sel.source}`;
    if (key !== lastListingKey) {
      lastListingKey = key;
      page = 0;
    }
    const srcLocal = sel.source === NONE ? NONE : localIndex(d, sel.source);
    const srcText = srcLocal >= 0 ? `“${tokenLabel(d.tokenStrs[srcLocal] ?? "", 24).text}”` : `token #${sel.source}`;
    setTitle(panel, `Skip-trigrams of ${headName(sel.layer, sel.head)}`, sel.source === NONE ? "largest OV and QK entries" : `source ${srcText}`);
    allButton.disabled = sel.source === NONE;

    // suggestions: this head's precomputed sources
    datalist.replaceChildren(
      ...precomputedSources(d, sel.layer, sel.head).map((i) => {
        const o = el(doc, "option");
        o.value = tokenLabel(d.tokenStrs[i] ?? "", Number.POSITIVE_INFINITY).text;
        return o;
      }),
    );

    // message line: the user's last search, else what the listing lacks, else the kernel's answer
    let text = String(m.get("source_message") ?? "");
    if (state === "head-missing") {
      text = offline
        ? `${headName(sel.layer, sel.head)} was not precomputed in this page; its skip-trigrams need a live kernel (or precompute it: heads=…).`
        : `Computing the skip-trigrams of ${headName(sel.layer, sel.head)} in the kernel…`;
    } else if (state === "source-missing") {
      text = offline
        ? `The skip-trigrams of source ${srcText} at ${headName(sel.layer, sel.head)} were not precomputed in this page; other source tokens need a live kernel. The search box suggests the sources stored here.`
        : `Computing the skip-trigrams of source ${srcText} in the kernel…`;
    }
    if (localMessage) text = localMessage;
    message.textContent = text;

    caption.textContent =
      sel.source === NONE
        ? `The ${Number(m.get("k")) || ""} largest OV entries (each with its source's top destination) and the largest QK entries (each with its source's top out).`
        : `The top destinations × top outs of source ${srcText}, best rank-sum first.`;

    // table
    buildHead();
    const order = sortListing(rows, d.tokenStrs, sortKey, sortDir);
    if (sel.row >= 0 && sel.row < rows.length) {
      const position = order.indexOf(sel.row);
      const wanted = pageOf(position, pageSize);
      if (selectedRowFollowed !== sel.row) {
        page = wanted;
        selectedRowFollowed = sel.row;
      }
    }
    const slice = pageSlice(order, page, pageSize);
    page = slice.page;
    let qkLimit = 0;
    let ovLimit = 0;
    for (const r of rows) {
      qkLimit = Math.max(qkLimit, Math.abs(r.qk));
      ovLimit = Math.max(ovLimit, Math.abs(r.ov));
    }
    const trs = slice.rows.map((i) => {
      const t = rows[i] as Trigram;
      const tr = el(doc, "tr");
      tr.dataset.cwRow = String(i);
      if (i === sel.row) tr.classList.add("cw-selected");
      const src = el(doc, "td");
      const srcTok = tokenCell(t.source, "cw-tok cw-src");
      srcTok.dataset.cwSource = String(d.tokenIds[t.source]);
      srcTok.title = `${srcTok.title ? `${srcTok.title}\n` : ""}show the skip-trigrams of this source`;
      src.append(srcTok);
      const dest = el(doc, "td");
      dest.append(tokenCell(t.dest));
      const out = el(doc, "td");
      out.append(tokenCell(t.out));
      const flags = el(doc, "td");
      if (t.out === t.source) {
        const b = el(doc, "span", "cw-badge cw-copy", "copy");
        b.title = "copying: the out token is the source token";
        flags.append(b);
      }
      if (t.origin & ORIGIN_OV) flags.append(el(doc, "span", "cw-badge", "OV top"));
      if (t.origin & ORIGIN_QK) flags.append(el(doc, "span", "cw-badge", "QK top"));
      tr.append(
        el(doc, "td", "cw-rank", String(i + 1)),
        src,
        el(doc, "td", "cw-sep", "…"),
        dest,
        el(doc, "td", "cw-sep", "→"),
        out,
        valueCell(t.qk, qkLimit),
        valueCell(t.ov, ovLimit),
        flags,
      );
      return tr;
    });
    tbody.replaceChildren(...trs);
    pageText.textContent = rows.length ? `rows ${slice.first}–${slice.last} of ${rows.length} · page ${slice.page + 1} of ${pageCount(rows.length, pageSize)}` : "no rows";
    prev.disabled = slice.page <= 0;
    next.disabled = slice.page >= pageCount(rows.length, pageSize) - 1;
    legend.textContent = "QK and OV cells: blue negative, red positive, scaled to the largest value listed. Click a source token to list its skip-trigrams.";

    const head = headName(sel.layer, sel.head);
    const selected = sel.row >= 0 && sel.row < rows.length ? (rows[sel.row] as Trigram) : null;
    panel.status.textContent = selected
      ? `${head} selected; row ${sel.row + 1}: ${describeRow(selected)} (QK ${fmt(selected.qk)}, OV ${fmt(selected.ov)})`
      : `${head} selected${sel.source === NONE ? "" : `, source ${srcText}`}`;
  }

  let selectedRowFollowed = NONE;
  const frame = perFrame(draw);

  function submitSearch(): void {
    const d = data;
    if (d === null) return;
    const query = input.value;
    if (!query) return;
    const sel = selection(d);
    const all = Array.from({ length: d.tokenStrs.length }, (_, i) => i);
    const found = findToken(d.tokenStrs, [...precomputedSources(d, sel.layer, sel.head), ...all], query);
    localMessage = "";
    if (found !== NONE) {
      setTraits(m, { source_token: d.tokenIds[found] as number, selected_row: NONE });
    } else if (offline) {
      localMessage = `“${tokenLabel(query, 24).text}” is not among the tokens stored in this page; looking up other tokens needs a live kernel.`;
    } else {
      setTraits(m, { source_query: query });
    }
    frame.schedule();
  }

  cleanups.push(
    listen(headSelect, "change", () => {
      const [layer, head] = headSelect.value.split(".").map(Number);
      localMessage = "";
      setTraits(m, { selected_layer: layer as number, selected_head: head as number, selected_row: NONE });
      frame.schedule();
    }),
    listen(sizeSelect, "change", () => {
      pageSize = Number(sizeSelect.value) || (PAGE_SIZES[0] as number);
      page = 0;
      frame.schedule();
    }),
    listen(input, "keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        submitSearch();
      }
    }),
    listen(showButton, "click", submitSearch),
    listen(allButton, "click", () => {
      localMessage = "";
      input.value = "";
      setTraits(m, { source_token: NONE, selected_row: NONE });
      frame.schedule();
    }),
    listen(prev, "click", () => {
      page -= 1;
      frame.schedule();
    }),
    listen(next, "click", () => {
      page += 1;
      frame.schedule();
    }),
    listen(thead, "click", (event) => {
      const th = (event.target as Element | null)?.closest?.("th[data-sort]");
      const key = th?.getAttribute("data-sort") as SortKey | null | undefined;
      if (!key) return;
      if (key === sortKey) sortDir = sortDir === "asc" ? "desc" : "asc";
      else {
        sortKey = key;
        sortDir = key === "qk" || key === "ov" ? "desc" : "asc";
      }
      page = 0;
      frame.schedule();
    }),
    listen(tbody, "click", (event) => {
      const target = event.target as Element | null;
      const srcTok = target?.closest?.("[data-cw-source]");
      if (srcTok) {
        localMessage = "";
        setTraits(m, { source_token: Number(srcTok.getAttribute("data-cw-source")), selected_row: NONE });
        frame.schedule();
        return;
      }
      const tr = target?.closest?.("tr[data-cw-row]");
      if (!tr) return;
      const i = Number(tr.getAttribute("data-cw-row"));
      const current = m.get("selected_row");
      selectedRowFollowed = i;
      setTraits(m, { selected_row: current === i ? NONE : i });
      frame.schedule();
    }),
    onTraits(m, ["token_ids", "token_strs", "rows", "row_values", "profile_sources", "profile_tokens", "profile_values", "ready"], () => {
      load();
      frame.schedule();
    }),
    onTraits(m, ["selected_layer", "selected_head", "source_token", "selected_row", "live", "source_message", "k", "model_name"], () => {
      frame.schedule();
    }),
  );

  load();
  draw();

  return () => {
    frame.cancel();
    for (const c of cleanups) c();
    panel.cleanup();
  };
}
