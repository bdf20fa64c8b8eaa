// The rotary offset control of the views that read QK circuits (eigenvalue
// scatter, skip-trigram table, composition map).
//
// A rotary head's QK circuit depends on the offset Δ = i − j between query and
// key positions, so those views hold one offset in `qk_offset` (-1 for models
// without rotary layers: no control) and say which. Changing it asks the
// kernel to recompute; an exported page holds one offset and says so.

import type { AnyModel } from "@anywidget/types";
import { el } from "./dom";
import { onTraits, setTraits } from "./selection";

interface OffsetTraits {
  qk_offset: number;
  [key: string]: unknown;
}

/** Offsets offered besides the current one. */
export const OFFSET_CHOICES: readonly number[] = [0, 1, 2, 4, 8, 16];

/** Words for an offset, as the control and captions show it. */
export function offsetLabel(offset: number): string {
  if (offset === 0) return "Δ = 0 (same position)";
  if (offset === 1) return "Δ = 1 (previous token)";
  return `Δ = ${offset}`;
}

/** The options of the control: the usual offsets and the current one, sorted. */
export function offsetOptions(current: number): number[] {
  const values = new Set<number>(OFFSET_CHOICES);
  if (Number.isInteger(current) && current >= 0) values.add(current);
  return [...values].sort((a, b) => a - b);
}

/**
 * Append the control to `container` and keep it in step with `qk_offset`.
 * Returns its cleanup.
 */
export function offsetControl(doc: Document, model: AnyModel<Record<string, unknown>>, container: HTMLElement): () => void {
  const m = model as unknown as AnyModel<OffsetTraits>;
  const offline = model.get("__offline__" as never) === true;
  const wrap = el(doc, "label", "cw-offset");
  wrap.dataset.cwOffset = "";
  wrap.append(doc.createTextNode("QK at rotary offset "));
  const select = el(doc, "select");
  wrap.append(select);
  container.append(wrap);

  const update = (): void => {
    const current = Number(m.get("qk_offset"));
    const rotary = Number.isInteger(current) && current >= 0;
    wrap.style.display = rotary ? "" : "none"; // (not `hidden`: the controls row's label styles would override it)
    if (!rotary) return;
    select.replaceChildren(
      ...offsetOptions(current).map((value) => {
        const option = el(doc, "option", undefined, offsetLabel(value));
        option.value = String(value);
        option.selected = value === current;
        return option;
      }),
    );
    select.value = String(current);
    select.disabled = offline;
    wrap.title = offline
      ? `This page holds the QK circuits at ${offsetLabel(current)}; other offsets need a live kernel.`
      : "A rotary head's QK circuit depends on the offset between query and key positions: x_i W_Q R(i − j) W_Kᵀ x_j.";
  };
  const onPick = (): void => setTraits(m, { qk_offset: Number(select.value) });
  select.addEventListener("change", onPick);
  const off = onTraits(m, ["qk_offset"], update);
  update();
  return () => {
    select.removeEventListener("change", onPick);
    off();
    wrap.remove();
  };
}
