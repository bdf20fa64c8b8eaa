// The skip-trigram table's body: its sortable header, one row per trigram
// ([source] … [destination] → [out], QK and OV shaded on a diverging scale,
// badges for copying and for the listing a row comes from), and a row in words.

import { DIVERGING, divergingIndex, lutCss, lutLuminance } from "../../lib/colour";
import { el } from "../../lib/dom";
import { fmt } from "../../lib/svg";
import type { Direction } from "../../lib/table";
import { setTokenText, tokenLabel } from "../../lib/tokens";
import { ORIGIN_OV, ORIGIN_QK, type SortKey, type Trigram, type TrigramData } from "../../lib/trigrams";

/** The table's columns: the sort key of each (null: not sortable), header, tooltip, numeric. */
export const COLUMNS: readonly { key: SortKey | null; label: string; title: string; num?: boolean }[] = [
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

/** The header row, the sorted column marked ▲ or ▼. */
export function headerRow(doc: Document, sortKey: SortKey, sortDir: Direction): HTMLTableRowElement {
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
  return tr;
}

/** A token of the local vocabulary as a table cell's text (untrusted: set as text). */
function tokenCell(doc: Document, d: TrigramData, i: number, className = "cw-tok"): HTMLSpanElement {
  const span = el(doc, "span", className);
  setTokenText(span, d.tokenStrs[i] ?? "", 28);
  return span;
}

/** A QK or OV value, shaded by its sign and size relative to `limit`. */
function valueCell(doc: Document, v: number, limit: number): HTMLTableCellElement {
  const td = el(doc, "td", "cw-num", fmt(v, 2));
  const idx = divergingIndex(v, limit);
  td.style.backgroundColor = lutCss(DIVERGING, idx);
  td.style.color = lutLuminance(DIVERGING, idx) > 0.3 ? "#111" : "#fff";
  return td;
}

/** Rows `shown` (indices into `rows`) of the listing; `selected` is marked; values shaded to the listing's largest. */
export function bodyRows(doc: Document, d: TrigramData, rows: readonly Trigram[], shown: readonly number[], selected: number): HTMLTableRowElement[] {
  let qkLimit = 0;
  let ovLimit = 0;
  for (const r of rows) {
    qkLimit = Math.max(qkLimit, Math.abs(r.qk));
    ovLimit = Math.max(ovLimit, Math.abs(r.ov));
  }
  return shown.map((i) => {
    const t = rows[i] as Trigram;
    const tr = el(doc, "tr");
    tr.dataset.cwRow = String(i);
    if (i === selected) tr.classList.add("cw-selected");
    const src = el(doc, "td");
    const srcTok = tokenCell(doc, d, t.source, "cw-tok cw-src");
    srcTok.dataset.cwSource = String(d.tokenIds[t.source]);
    srcTok.title = `${srcTok.title ? `${srcTok.title}\n` : ""}show the skip-trigrams of this source`;
    src.append(srcTok);
    const dest = el(doc, "td");
    dest.append(tokenCell(doc, d, t.dest));
    const out = el(doc, "td");
    out.append(tokenCell(doc, d, t.out));
    const flags = el(doc, "td");
    if (t.out === t.source) {
      const b = el(doc, "span", "cw-badge cw-copy", "copy");
      b.title = "copying: the out token is the source token";
      flags.append(b);
    }
    if (t.origin & ORIGIN_OV) flags.append(el(doc, "span", "cw-badge", "OV top"));
    if (t.origin & ORIGIN_QK) flags.append(el(doc, "span", "cw-badge", "QK top"));
    tr.append(el(doc, "td", "cw-rank", String(i + 1)), src, el(doc, "td", "cw-sep", "…"), dest, el(doc, "td", "cw-sep", "→"), out, valueCell(doc, t.qk, qkLimit), valueCell(doc, t.ov, ovLimit), flags);
    return tr;
  });
}

/** A trigram in words: “source” … “destination” → “out”. */
export function describeRow(d: TrigramData, t: Trigram): string {
  const s = (i: number) => `“${tokenLabel(d.tokenStrs[i] ?? "", 20).text}”`;
  return `${s(t.source)} … ${s(t.dest)} → ${s(t.out)}`;
}
