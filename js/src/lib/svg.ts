// SVG building blocks for the weight-space views: elements, linear scales,
// ticks, number formatting and the categorical palette.
//
// Presentation goes in attributes (fill, stroke, font-size), not in CSS
// classes, so an SVG copied out of the page (export) looks the same. Text is
// only ever set with textContent.

import { visibleLabel } from "./tokens";

export const SVG_NS = "http://www.w3.org/2000/svg";

type Attrs = Record<string, string | number | null | undefined>;

/** Create an SVG element with attributes (null/undefined ones skipped) and optional text. */
export function svgEl<K extends keyof SVGElementTagNameMap>(
  doc: Document,
  tag: K,
  attrs: Attrs = {},
  text?: string,
): SVGElementTagNameMap[K] {
  const node = doc.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Add a `<title>` (native tooltip) holding `text` as text. */
export function svgTitle(doc: Document, parent: SVGElement, text: string): void {
  parent.append(svgEl(doc, "title", {}, visibleLabel(text)));
}

/** A linear map from `domain` to `range` (extrapolates outside). */
export interface Scale {
  (v: number): number;
  domain: readonly [number, number];
  range: readonly [number, number];
}

export function linearScale(domain: readonly [number, number], range: readonly [number, number]): Scale {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
  const f = ((v: number) => r0 + (v - d0) * k) as Scale;
  f.domain = domain;
  f.range = range;
  return f;
}

/** About `count` round tick values covering [min, max] (steps of 1, 2 or 5 × 10ⁿ). */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (min === max) return [min];
  if (min > max) [min, max] = [max, min];
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  const start = Math.ceil(min / step - 1e-9);
  const stop = Math.floor(max / step + 1e-9);
  for (let i = start; i <= stop; i++) out.push(Number((i * step).toPrecision(12)));
  return out;
}

/** A number for display: fixed `digits` decimals, a true minus sign, "–" for NaN. */
export function fmt(v: number, digits = 2): string {
  if (!Number.isFinite(v)) return "–";
  const s = Math.abs(v) < 0.5 * 10 ** -digits ? (0).toFixed(digits) : v.toFixed(digits);
  return s.startsWith("-") ? `\u2212${s.slice(1)}` : s;
}

/** Okabe–Ito: a categorical palette distinguishable with the common colour-vision deficiencies. */
export const OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442"] as const;

/** Colour of layer `l` (cycles after eight layers; pair it with `layerShape` beyond that). */
export function layerColour(layer: number): string {
  return OKABE_ITO[((layer % OKABE_ITO.length) + OKABE_ITO.length) % OKABE_ITO.length] as string;
}

/** Marker of layer `l`: circles for the first eight layers, squares for the next eight, diamonds after. */
export function layerShape(layer: number): "circle" | "square" | "diamond" {
  const cycle = Math.floor(layer / OKABE_ITO.length);
  return cycle === 0 ? "circle" : cycle === 1 ? "square" : "diamond";
}

/** A marker element of the given shape centred at (x, y) with radius r. */
export function marker(doc: Document, shape: "circle" | "square" | "diamond", x: number, y: number, r: number, attrs: Attrs): SVGElement {
  if (shape === "circle") return svgEl(doc, "circle", { cx: x, cy: y, r, ...attrs });
  if (shape === "square") return svgEl(doc, "rect", { x: x - r * 0.9, y: y - r * 0.9, width: r * 1.8, height: r * 1.8, ...attrs });
  return svgEl(doc, "path", { d: `M${x},${y - r * 1.2}L${x + r * 1.2},${y}L${x},${y + r * 1.2}L${x - r * 1.2},${y}Z`, ...attrs });
}

/** `L<layer>H<head>`, the paper's way of naming a head. */
export function headName(layer: number, head: number): string {
  return `L${layer}H${head}`;
}

/** Shared text attributes of axis labels. */
export const AXIS_TEXT: Attrs = { "font-size": 11, fill: "#444", "font-family": "system-ui, sans-serif" };

/**
 * Draw a left and a bottom axis with ticks and labels into `g` for scales `x`
 * and `y` (whose ranges are pixel positions).
 */
export function drawAxes(
  doc: Document,
  g: SVGGElement,
  x: Scale,
  y: Scale,
  opts: { xLabel: string; yLabel: string; xTicks?: number[]; yTicks?: number[]; grid?: boolean },
): void {
  const [x0, x1] = x.range;
  const [y0, y1] = y.range; // y0 bottom, y1 top
  const xt = opts.xTicks ?? niceTicks(x.domain[0], x.domain[1], 4);
  const yt = opts.yTicks ?? niceTicks(y.domain[0], y.domain[1], 4);
  const axis = { stroke: "#888", "stroke-width": 1 };
  if (opts.grid) {
    for (const t of xt) g.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: y0, y2: y1, stroke: t === 0 ? "#bbb" : "#eee" }));
    for (const t of yt) g.append(svgEl(doc, "line", { x1: x0, x2: x1, y1: y(t), y2: y(t), stroke: t === 0 ? "#bbb" : "#eee" }));
  }
  g.append(svgEl(doc, "line", { x1: x0, x2: x1, y1: y0, y2: y0, ...axis }));
  g.append(svgEl(doc, "line", { x1: x0, x2: x0, y1: y0, y2: y1, ...axis }));
  for (const t of xt) {
    g.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: y0, y2: y0 + 4, ...axis }));
    g.append(svgEl(doc, "text", { class: "cw-tick-x", x: x(t), y: y0 + 15, "text-anchor": "middle", ...AXIS_TEXT }, fmt(t, tickDigits(xt))));
  }
  for (const t of yt) {
    g.append(svgEl(doc, "line", { x1: x0 - 4, x2: x0, y1: y(t), y2: y(t), ...axis }));
    g.append(svgEl(doc, "text", { class: "cw-tick-y", x: x0 - 7, y: y(t) + 4, "text-anchor": "end", ...AXIS_TEXT }, fmt(t, tickDigits(yt))));
  }
  g.append(svgEl(doc, "text", { x: (x0 + x1) / 2, y: y0 + 32, "text-anchor": "middle", ...AXIS_TEXT, "font-size": 12, fill: "#222" }, opts.xLabel));
  const cy = (y0 + y1) / 2;
  g.append(
    svgEl(doc, "text", { x: x0 - 38, y: cy, "text-anchor": "middle", transform: `rotate(-90 ${x0 - 38} ${cy})`, ...AXIS_TEXT, "font-size": 12, fill: "#222" }, opts.yLabel),
  );
}

/**
 * Decimals needed to write every tick exactly (0.25 is "0.25", never "0.3",
 * so a label always names its gridline), at most 4.
 */
export function tickDigits(ticks: readonly number[]): number {
  const finite = ticks.filter((t) => Number.isFinite(t));
  for (let d = 0; d < 4; d++) if (finite.every((t) => Math.abs(Number(t.toFixed(d)) - t) <= 1e-9 * Math.max(1, Math.abs(t)))) return d;
  return 4;
}
