// SkipTrigramTable view: a head's largest skip-trigrams [source] … [destination]
// → [out], sortable and paged, with a search box for other source tokens.
//
// Kernel → view: token_ids/token_strs (the local vocabulary), rows,
// row_values, profile_* (precomputed sources), ready, live (a source computed
// on demand), source_message; heads computed on demand arrive alone in
// `trigram_update` messages. View → kernel: selected_layer, selected_head,
// source_token, source_query (text for the kernel to resolve), selected_row.
//
// With no kernel (`__offline__`), the precomputed rows and sources stay
// browsable and the view says plainly that other tokens need a live kernel.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { signLegend } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { noExport } from "../lib/export";
import { offsetControl } from "../lib/offset";
import { clearError, makePanel, runView, setTitle, showError } from "../lib/panel";
import { indexOr, NONE, perFrame, setTraits } from "../lib/selection";
import { fmt, headName } from "../lib/svg";
import { type Direction, pageCount, pageOf, pageSlice } from "../lib/table";
import { tokenLabel } from "../lib/tokens";
import {
  currentListing,
  emptyUpdates,
  findToken,
  type LiveProfile,
  localIndex,
  precomputedSources,
  type SortKey,
  sortListing,
  takeUpdate,
  type Trigram,
  type TrigramData,
  toTrigramData,
  withUpdates,
} from "../lib/trigrams";
import { bodyRows, describeRow, headerRow } from "./skiptrigrams/table";
import "../styles/skiptrigrams.css";

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
  profile_order: WireArray;
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

const PAGE_SIZES = [12, 25, 50];

export function renderSkipTrigrams({ model, el: root }: RenderProps<TrigramTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "skiptrigrams", "cw-trigrams", () => headLabel());
  const cleanups: (() => void)[] = [];
  const offline = m.get("__offline__" as never) === true;

  let data: TrigramData | null = null; // the state with what the kernel sent since (updates)
  let base: TrigramData | null = null;
  const updates = emptyUpdates();
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
  cleanups.push(offsetControl(doc, m as unknown as AnyModel<Record<string, unknown>>, panel.controls));

  const message = el(doc, "div", "cw-message");
  const caption = el(doc, "div", "cw-note");
  const table = el(doc, "table");
  const thead = el(doc, "thead");
  const tbody = el(doc, "tbody");
  table.append(thead, tbody);
  const pager = el(doc, "div", "cw-pager");
  // the pager's buttons and the hint are the tool, not the figure (left out of exports)
  const prev = noExport(el(doc, "button", "cw-button cw-small", "‹ Prev"));
  prev.type = "button";
  const next = noExport(el(doc, "button", "cw-button cw-small", "Next ›"));
  next.type = "button";
  const pageText = el(doc, "span");
  pager.append(prev, pageText, next);
  const legend = el(doc, "div", "cw-note");
  panel.body.append(message, caption, table, pager, legend);

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
      base = toTrigramData(
        decodeArray(m.get("token_ids")),
        (m.get("token_strs") ?? []).map(String),
        decodeArray(m.get("rows")),
        decodeArray(m.get("row_values")),
        decodeArray(m.get("profile_sources")),
        decodeArray(m.get("profile_tokens")),
        decodeArray(m.get("profile_values")),
        decodeArray(m.get("ready")),
        decodeArray(m.get("profile_order")),
      );
      data = withUpdates(base, updates);
    } catch (err) {
      base = null;
      data = null;
      tbody.replaceChildren();
      showError(panel, err);
      return;
    }
    clearError(panel);
    const options: HTMLOptionElement[] = [];
    for (let l = 0; l < data.nLayers; l++)
      for (let h = 0; h < data.nHeads; h++) {
        const o = el(doc, "option", undefined, headName(l, h) + (data.ready[l * data.nHeads + h] ? "" : offline ? " (not stored)" : " (computed on demand)"));
        o.value = `${l}.${h}`;
        options.push(o);
      }
    headSelect.replaceChildren(...options);
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
    thead.replaceChildren(headerRow(doc, sortKey, sortDir));
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
    tbody.replaceChildren(...bodyRows(doc, d, rows, slice.rows, sel.row));
    pageText.textContent = rows.length ? `rows ${slice.first}–${slice.last} of ${rows.length} · page ${slice.page + 1} of ${pageCount(rows.length, pageSize)}` : "no rows";
    prev.disabled = slice.page <= 0;
    next.disabled = slice.page >= pageCount(rows.length, pageSize) - 1;
    legend.textContent = `QK and OV cells: ${signLegend("raises the score or logit", "lowers it")}, scaled to the largest value listed.`;
    legend.append(noExport(el(doc, "span", undefined, " Click a source token to list its skip-trigrams.")));

    const head = headName(sel.layer, sel.head);
    const selected = sel.row >= 0 && sel.row < rows.length ? (rows[sel.row] as Trigram) : null;
    panel.status.textContent = selected
      ? `${head} selected; row ${sel.row + 1}: ${describeRow(d, selected)} (QK ${fmt(selected.qk)}, OV ${fmt(selected.ov)})`
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
  );

  // heads the kernel computes on demand arrive alone, in custom messages
  const onCustom = (content: unknown, buffers: unknown) => {
    if (base !== null && takeUpdate(updates, base, content, Array.isArray(buffers) ? buffers : [])) {
      load();
      frame.schedule();
    }
  };
  m.on("msg:custom", onCustom);
  cleanups.push(() => m.off("msg:custom", onCustom));
  if (!offline) m.send({ type: "want_trigram_update" });

  return runView(m, panel, frame, cleanups, { data: ["token_ids", "token_strs", "rows", "row_values", "profile_sources", "profile_tokens", "profile_values", "ready"], redraw: ["selected_layer", "selected_head", "source_token", "selected_row", "live", "source_message", "k", "model_name"] }, load, draw);
}
