// Colour for attention weights and for shading tokens by a value.
//
// `ATTENTION` is seaborn's "mako" reversed: perceptually uniform and
// colour-blind safe like viridis, but running from a pale tint (weight 0) to
// near black (weight 1), so a mostly-zero pattern reads as a light page with
// dark structure, and the same scale can shade token text backgrounds.
// Signed values (logit effects) use `DIVERGING` (RdBu) from ./colour.
//
// Token shading is incremental: `shadeIndices` turns values into LUT indices
// (-1 for "no shade") and `applyShades` touches only the spans whose index
// changed, so hovering over 2,048 tokens restyles just the few that differ.

import { divergingIndex, type Lut, lutCss, lutLuminance, makeLut } from "./colour";

/** seaborn "mako" sampled at 16 even steps (dark → light). */
const MAKO = [
  "#0b0405", "#1d111d", "#2d1d38", "#382a54", "#403872", "#40498e", "#395d9c", "#3671a0",
  "#3484a5", "#3497a9", "#38aaac", "#45bdad", "#60ceac", "#91dbb4", "#bbe7c8", "#dcf4e3",
];

/** Sequential scale for weights in [0, 1]: pale (0) → dark (1). */
export const ATTENTION: Lut = makeLut([...MAKO].reverse());

/** LUT index of a weight in [0, 1] (quantised like the wire format), or -1 for no shade (zero, NaN). */
export function weightIndex(w: number): number {
  if (!(w > 0)) return -1;
  const i = Math.round(w * 255);
  return i <= 0 ? -1 : Math.min(255, i);
}

/**
 * LUT indices for per-token values into `out` (-1 = no shade).
 * `limit` > 0 selects the signed scale (`v / limit` in [-1, 1], zero and NaN unshaded);
 * otherwise values are weights in [0, 1].
 */
export function shadeIndices(values: ArrayLike<number> | null, out: Int16Array, limit = 0): Int16Array {
  for (let i = 0; i < out.length; i++) {
    const v = values === null ? Number.NaN : (values[i] as number);
    if (limit > 0) out[i] = Number.isNaN(v) || v === 0 ? -1 : divergingIndex(v, limit);
    else out[i] = weightIndex(v);
  }
  return out;
}

/**
 * Give each span the background of its index in `next` (and a readable text
 * colour), changing only spans whose index differs from `prev` (updated in
 * place). Returns how many spans changed.
 */
export function applyShades(
  spans: readonly HTMLElement[],
  next: Int16Array,
  prev: Int16Array,
  lut: Lut,
  lutKey: number,
  prevKey: Int16Array,
): number {
  let changed = 0;
  for (let i = 0; i < spans.length; i++) {
    const idx = next[i] as number;
    if (idx === prev[i] && (idx < 0 || lutKey === prevKey[i])) continue;
    prev[i] = idx;
    prevKey[i] = lutKey;
    changed++;
    const span = spans[i] as HTMLElement;
    if (idx < 0) {
      span.style.removeProperty("background-color");
      span.style.removeProperty("color");
    } else {
      const css = cssOf(lut);
      span.style.backgroundColor = css.background[idx] as string;
      span.style.color = css.text[idx] as string;
    }
  }
  return changed;
}

const CSS_CACHE = new WeakMap<Lut, { background: string[]; text: string[] }>();

/** CSS background and readable text colour of every LUT entry (computed once per LUT). */
export function cssOf(lut: Lut): { background: string[]; text: string[] } {
  let css = CSS_CACHE.get(lut);
  if (css === undefined) {
    const background: string[] = [];
    const text: string[] = [];
    for (let i = 0; i < 256; i++) {
      background.push(lutCss(lut, i));
      text.push(lutLuminance(lut, i) > 0.3 ? "#111" : "#fff");
    }
    css = { background, text };
    CSS_CACHE.set(lut, css);
  }
  return css;
}

/** A CSS linear gradient through `lut` (for a colour bar), left → right. */
export function lutGradient(lut: Lut, stops = 9): string {
  const parts: string[] = [];
  for (let i = 0; i < stops; i++) {
    const t = i / (stops - 1);
    parts.push(`${lutCss(lut, t * 255)} ${Math.round(t * 100)}%`);
  }
  return `linear-gradient(to right, ${parts.join(", ")})`;
}
