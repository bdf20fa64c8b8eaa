// Where one destination attends: its strongest sources as a short ranked list of bars, under the token strip.
// It fills the column beside the pattern (blank below a short prompt's token strip otherwise) with the numbers
// the pattern shows as shades. Tokens are set as text.

import { el } from "../../lib/dom";
import { fmt } from "../../lib/svg";
import { NONE } from "../../lib/selection";
import type { Sel } from "./layout";
import type { PatternSource } from "./source";
import { describe } from "./words";

/** Sources listed for the selected (or hovered) destination. */
export const TOP_SOURCES = 10;

/** The `k` largest entries of `row` with a weight above 0, largest first (ties: the earlier position first). */
export function topEntries(row: ArrayLike<number>, k: number): { index: number; value: number }[] {
  const out: { index: number; value: number }[] = [];
  for (let i = 0; i < row.length; i++) {
    const value = row[i] as number;
    if (value > 0) out.push({ index: i, value });
  }
  return out.sort((a, b) => b.value - a.value || a.index - b.index).slice(0, Math.max(0, k));
}

/** The list's element and its update from the selection (`dest`: the hovered destination, or the selected one). */
export function topSources(doc: Document): { element: HTMLDivElement; update(s: Sel, dest: number, p: PatternSource, tokens: readonly string[], long: boolean): void } {
  const element = el(doc, "div", "cw-top-sources");
  element.hidden = true; // (until a destination is chosen)
  let key = "";
  function update(s: Sel, dest: number, p: PatternSource, tokens: readonly string[], long: boolean): void {
    const ready = !long && dest !== NONE && dest < p.nTokens && p.ready(s.layer, s.head);
    const next = ready ? `${s.layer}.${s.head}.${dest}.${p.nTokens}` : "";
    if (next === key && (!ready || p.complete(s.layer, s.head))) return;
    key = next;
    element.hidden = !ready;
    if (!ready) {
      element.replaceChildren();
      return;
    }
    const entries = topEntries(p.row(s.layer, s.head, dest, 0, p.nTokens) as ArrayLike<number>, TOP_SOURCES);
    const head = el(doc, "div", "cw-top-title", `Where destination ${describe(tokens, dest)} attends (L${s.layer}H${s.head}, strongest ${entries.length} sources)`);
    const rows = entries.map(({ index, value }) => {
      const row = el(doc, "div", "cw-top-row");
      row.dataset.cwSource = String(index);
      const bar = el(doc, "span", "cw-top-bar");
      const fill = el(doc, "i");
      fill.style.width = `${Math.round(Math.min(1, value) * 100)}%`;
      bar.append(fill);
      row.append(el(doc, "span", "cw-top-value", fmt(value, 3)), bar, el(doc, "span", "cw-top-token", describe(tokens, index)));
      return row;
    });
    element.replaceChildren(head, ...rows);
  }
  return { element, update };
}
