// A colour bar as SVG: the scale's colours in small rects (no gradient ids to
// collide between widgets on one page, and an export copies it exactly), with
// tick marks and numbers under it and a label above.

import { type Lut, lutCss } from "./colour";
import { fmt, linearScale, niceTicks, svgEl, tickDigits } from "./svg";

/** Tick values of a colour bar over [lo, hi]: round values inside, plus both ends. */
export function barTicks(lo: number, hi: number): number[] {
  if (!(Number.isFinite(lo) && Number.isFinite(hi)) || lo === hi) return [lo];
  const inner = niceTicks(lo, hi, 4).filter((t) => t > lo + (hi - lo) * 0.2 && t < hi - (hi - lo) * 0.2);
  return [lo, ...inner, hi];
}

/**
 * A horizontal colour bar for a LUT spanning values `lo`..`hi` (LUT index 0 at
 * `lo`, 255 at `hi`), `width` px wide, labelled `label`; ticks written with
 * `digits` decimals (by default as many as they need, two or three).
 */
export function colourBar(doc: Document, lut: Lut, lo: number, hi: number, label: string, width = 220, digits?: number): SVGSVGElement {
  const height = 42;
  const pad = 22; // room for the end labels, centred on the ends
  const barTop = 16;
  const barHeight = 10;
  const svg = svgEl(doc, "svg", { class: "cw-colourbar", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `colour bar: ${label}, ${fmt(lo, 3)} to ${fmt(hi, 3)}` });
  svg.append(svgEl(doc, "text", { x: pad, y: 11, "font-size": 11, fill: "#333" }, label));
  const x = linearScale([lo, hi], [pad, width - pad]);
  const steps = 64;
  const span = (width - 2 * pad) / steps;
  for (let i = 0; i < steps; i++) {
    svg.append(svgEl(doc, "rect", { x: pad + i * span, y: barTop, width: span + 0.5, height: barHeight, fill: lutCss(lut, ((i + 0.5) / steps) * 255) }));
  }
  svg.append(svgEl(doc, "rect", { x: pad, y: barTop, width: width - 2 * pad, height: barHeight, fill: "none", stroke: "#999", "stroke-width": 0.6 }));
  const ticks = barTicks(lo, hi);
  const places = digits ?? Math.max(2, Math.min(3, tickDigits(ticks)));
  for (const t of ticks) {
    svg.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: barTop + barHeight, y2: barTop + barHeight + 3, stroke: "#666" }));
    svg.append(svgEl(doc, "text", { class: "cw-colourbar-tick", x: x(t), y: barTop + barHeight + 14, "text-anchor": "middle", "font-size": 10, fill: "#444", "font-variant-numeric": "tabular-nums" }, fmt(t, places)));
  }
  return svg;
}
