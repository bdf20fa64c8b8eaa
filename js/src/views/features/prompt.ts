// PromptFeatures view: a prompt's tokens as columns; under each token its
// strongest active units (chips: name and activation), strongest first.
//
// Kernel → view: tokens, active [n_tokens, k] (unit ids, -1 none),
// active_value, unit_prefix, site, model_name. View → kernel:
// selected_feature (a chip), selected_dest (a token). Long prompts are
// virtualised: only the columns in view (and a margin) are DOM nodes.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../../lib/arrays";
import { el, listen } from "../../lib/dom";
import { columnWindow, denseWords, short } from "../../lib/features";
import { clearError, makePanel, runView, setTitle, showError } from "../../lib/panel";
import { NONE, perFrame, setTraits } from "../../lib/selection";
import { compactToken, tokenLabel } from "../../lib/tokens";
import "../../styles/features.css";

export interface PromptFeaturesTraits {
  [key: string]: unknown;
  tokens: string[];
  active: WireArray;
  active_value: WireArray;
  unit_prefix: string;
  site: string;
  model_name: string;
  dense: WireArray;
  dense_share: number;
  selected_feature: number;
  selected_dest: number;
}

type Model = AnyModel<PromptFeaturesTraits>;

/** Width of a token's column, px. */
export const COLUMN = 112; // (room for "◆L1.tc/3636 37.5": a dense mark, a name and an activation, unclipped)

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const int = (v: unknown, fallback = NONE): number => (typeof v === "number" && Number.isInteger(v) ? v : fallback);

export function renderPromptFeatures({ model, el: root }: RenderProps<PromptFeaturesTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let ids: NDArray | null = null;
  let values: NDArray | null = null;
  const panel = makePanel(root, "promptfeatures", "cw-promptfeatures", () => `pos${int(m.get("selected_dest"), 0)}`);
  const cleanups: (() => void)[] = [];
  const scroller = el(doc, "div", "cw-pf-scroll");
  const track = el(doc, "div", "cw-pf-track");
  scroller.append(track);
  const legend = el(doc, "div", "cw-pf-legend");
  panel.body.append(legend, scroller);
  let dense = new Set<number>();
  /** The position last brought into view (-1: none yet). */
  let scrolledTo = -1;

  function load(): void {
    try {
      const a = decodeArray(m.get("active"));
      const b = decodeArray(m.get("active_value"));
      if (a.shape.length !== 2 || a.shape.join() !== b.shape.join()) throw new Error("circuitwidgets: active and active_value must be [n_tokens, k] alike");
      [ids, values] = [a, b];
      const d = m.get("dense") === undefined || m.get("dense") === null ? null : decodeArray(m.get("dense"));
      dense = new Set(d === null ? [] : Array.from(d.data as ArrayLike<number>));
      clearError(panel);
    } catch (err) {
      [ids, values] = [null, null];
      showError(panel, err);
    }
  }

  function draw(): void {
    setTitle(panel, "Features per token", `${String(m.get("site") ?? "")} · ${String(m.get("model_name") ?? "")}`);
    const tokens = strings(m.get("tokens"));
    const prefix = String(m.get("unit_prefix") ?? "");
    if (ids === null || values === null) {
      track.replaceChildren();
      return;
    }
    const n = tokens.length;
    const k = ids.shape[1] ?? 0;
    const share = Number(m.get("dense_share") ?? 0);
    legend.textContent = `chips: unit and its activation, strongest first${dense.size > 0 && share > 0 ? ` · ◆ dashed: dense, ${denseWords(share)} of the corpus read` : ""}`;
    const dest = int(m.get("selected_dest"));
    const feature = int(m.get("selected_feature"));
    track.style.width = `${n * COLUMN}px`;
    // a position chosen elsewhere (a token, a head in a linked view) is brought into view once, then the reader scrolls
    if (dest >= 0 && dest < n && dest !== scrolledTo && scroller.clientWidth > 0) {
      const x = dest * COLUMN;
      if (x < scroller.scrollLeft || x + COLUMN > scroller.scrollLeft + scroller.clientWidth) scroller.scrollLeft = Math.max(0, x + COLUMN / 2 - scroller.clientWidth / 2);
      scrolledTo = dest;
    }
    const { start, end } = columnWindow(scroller.scrollLeft, scroller.clientWidth, COLUMN, n);
    track.style.height = `${(k + 1) * 24 + 8}px`;
    const columns: HTMLElement[] = [];
    for (let p = start; p < end; p++) {
      const col = el(doc, "div", p === dest ? "cw-pf-col cw-pf-selected" : "cw-pf-col");
      col.dataset.cwRow = String(p);
      col.style.left = `${p * COLUMN}px`;
      col.style.width = `${COLUMN - 4}px`;
      const tok = el(doc, "button", "cw-pf-token cw-token");
      const shown = compactToken(tokens[p] ?? "", 12);
      tok.textContent = shown.text;
      tok.title = `${p}: ${shown.title ?? shown.text}`;
      tok.dataset.cwPos = String(p);
      col.append(tok);
      for (let j = 0; j < k; j++) {
        const id = ids.data[p * k + j] as number;
        if (id < 0) break;
        const isDense = dense.has(id);
        const chip = el(doc, "button", `cw-pf-chip${id === feature ? " cw-pf-on" : ""}${isDense ? " cw-pf-dense" : ""}`);
        chip.dataset.cwUnit = String(id);
        chip.textContent = `${isDense ? "◆" : ""}${prefix}${id} ${short(values.data[p * k + j] as number)}`;
        chip.title = `${chip.textContent} at position ${p}${isDense ? ` (dense: ${denseWords(Number(m.get("dense_share") ?? 0))})` : ""}`; // (the chip may be too narrow for a long name)
        col.append(chip);
      }
      columns.push(col);
    }
    track.replaceChildren(...columns);
    const active = dest >= 0 && dest < n ? Array.from({ length: k }, (_, j) => ids?.data[dest * k + j] as number).filter((i) => i >= 0).length : 0;
    panel.status.textContent = dest >= 0 && dest < n ? `position ${dest} '${tokenLabel(tokens[dest] ?? "", 16).text}': ${active} active shown${feature >= 0 ? `; ${prefix}${feature} selected` : ""}` : `${n} tokens; click a token to select it, a feature to open it in a linked dashboard`;
    if (end - start < n) panel.status.textContent += ` · showing tokens ${start}–${end - 1} of ${n}`;
  }

  const frame = perFrame(draw);
  cleanups.push(
    listen(scroller, "scroll", () => frame.schedule()),
    listen(track, "click", (event) => {
      const target = event.target as Element | null;
      const chip = target?.closest?.("[data-cw-unit]");
      const tok = target?.closest?.("[data-cw-pos]");
      const col = target?.closest?.(".cw-pf-col");
      if (chip && col) {
        const pos = col.querySelector("[data-cw-pos]")?.getAttribute("data-cw-pos");
        setTraits(m, { selected_feature: Number(chip.getAttribute("data-cw-unit")), ...(pos ? { selected_dest: Number(pos) } : {}) });
      } else if (tok) setTraits(m, { selected_dest: Number(tok.getAttribute("data-cw-pos")) });
      frame.schedule();
    }),
  );
  return runView(m, panel, frame, cleanups, { data: ["active", "active_value", "dense"], redraw: ["dense_share", "tokens", "unit_prefix", "site", "model_name", "selected_feature", "selected_dest"] }, load, draw);
}
