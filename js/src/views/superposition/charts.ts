// The superposition view's four charts, each a function of one model's
// measurements (computed by the kernel) to an SVG. Presentation in attributes,
// text as text; every feature mark carries `data-cw-feature` for selection.

import type { NDArray } from "../../lib/arrays";
import { DIVERGING, divergingIndex, lutCss, makeLut, sequentialIndex, VIRIDIS } from "../../lib/colour";
import { colourBar } from "../../lib/colourbar";
import { dimensionalityPoints, featurePoints, PHASES, REPRESENTED, STICKY_FRACTIONS } from "../../lib/superposition";
import { AXIS_TEXT, fmt, linearScale, svgEl, svgTitle } from "../../lib/svg";

/** One model at one snapshot, as the charts draw it. */
export interface Shown {
  W: Float32Array; // [m, n]
  m: number;
  n: number;
  norms: Float32Array;
  superposition: Float32Array;
  dimensionality: Float32Array;
  gram: Float32Array; // [n, n]
  b: Float32Array; // [n]
  gramLimit: number; // WᵀW's colour scale: its largest |value| over every snapshot of this model (fixed while scrubbing)
  selected: number;
}

/** Fill of a feature that is not represented (‖W_i‖ ≤ 0.5): drawn as dead in every chart. */
export const DEAD = "#c4c4c4";

/** Whether feature `i` is represented (its norm above the paper's 0.5). */
const alive = (s: Shown, i: number): boolean => (s.norms[i] ?? 0) > REPRESENTED;

interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

const overlaps = (a: Box, b: Box): boolean => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

/**
 * Label positions beyond each arrow's tip that never overlap one another (nor leave the chart): each label tries
 * points further out along its arrow and then turned a little either side; one that fits nowhere is not drawn
 * (its arrow's tooltip still names it). `tips` are the arrows' ends, `origin` their start, `texts` the labels.
 */
export function placeLabels(origin: { x: number; y: number }, tips: readonly { x: number; y: number; text: string }[], size: number): (Box | null)[] {
  const placed: Box[] = [];
  return tips.map((tip) => {
    const w = 7 * tip.text.length + 4; // (11 px digits are about 6.4 px wide and 13 px tall; a pixel to spare)
    const h = 15;
    const dx = tip.x - origin.x;
    const dy = tip.y - origin.y;
    const len = Math.max(1e-6, Math.hypot(dx, dy));
    for (const out of [12, 22, 34]) {
      for (const turn of [0, 0.35, -0.35, 0.7, -0.7]) {
        const c = Math.cos(turn);
        const s = Math.sin(turn);
        const ux = (dx * c - dy * s) / len;
        const uy = (dx * s + dy * c) / len;
        const box = { x: tip.x + ux * out - w / 2, y: tip.y + uy * out - h / 2, w, h };
        if (box.x < 0 || box.y < 0 || box.x + w > size || box.y + h > size) continue;
        if (placed.some((p) => overlaps(p, box))) continue;
        placed.push(box);
        return box;
      }
    }
    return null;
  });
}

/** Superposition 0 → near black, 1 and more → yellow (the paper's Figure 2 idea). */
export const SUPERPOSITION_LUT = makeLut(["#1a1a1a", "#7b3294", "#d55e00", "#f0e442"]);

/** Colour of feature `i` of `n`: the most important (feature 0) darkest. */
export function featureColour(i: number, n: number): string {
  return lutCss(VIRIDIS, sequentialIndex(n > 1 ? (0.85 * i) / (n - 1) : 0));
}

function frame(doc: Document, width: number, height: number, label: string): SVGSVGElement {
  const svg = svgEl(doc, "svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  svgTitle(doc, svg, label);
  return svg;
}

/** Feature directions: arrows from the origin to each column of W in hidden dimensions 1 and 2. */
export function geometryChart(doc: Document, s: Shown): SVGSVGElement {
  const size = 250;
  const svg = frame(doc, size, size, "feature directions in the hidden space");
  const limit = Math.max(1.25, ...Array.from(s.norms, (v) => v * 1.08));
  const x = linearScale([-limit, limit], [10, size - 10]);
  const y = linearScale([-limit, limit], [size - 10, 10]);
  svg.append(svgEl(doc, "circle", { cx: x(0), cy: y(0), r: x(1) - x(0), fill: "none", stroke: "#ccc", "stroke-dasharray": "3 3" }));
  svg.append(svgEl(doc, "line", { x1: x(-limit), x2: x(limit), y1: y(0), y2: y(0), stroke: "#eee" }));
  svg.append(svgEl(doc, "line", { x1: x(0), x2: x(0), y1: y(-limit), y2: y(limit), stroke: "#eee" }));
  const points = featurePoints(s.W, s.m, s.n);
  // labels: the strongest features placed first, none overlapping
  const order = points.map((_, i) => i).filter((i) => alive(s, i)).sort((a, b) => (s.norms[b] ?? 0) - (s.norms[a] ?? 0));
  const boxes = placeLabels({ x: x(0), y: y(0) }, order.map((i) => ({ x: x(points[i]?.x ?? 0), y: y(points[i]?.y ?? 0), text: String(i) })), size);
  const labelOf = new Map(order.map((i, k) => [i, boxes[k] ?? null]));
  points.forEach((pt, i) => {
    const selected = i === s.selected;
    const live = alive(s, i);
    const g = svgEl(doc, "g", { class: live ? "cw-feature" : "cw-feature cw-dead", "data-cw-feature": i, "data-cw-x": pt.x.toFixed(4), "data-cw-y": pt.y.toFixed(4) });
    const colour = live ? featureColour(i, s.n) : DEAD;
    g.append(svgEl(doc, "line", { x1: x(0), y1: y(0), x2: x(pt.x), y2: y(pt.y), stroke: colour, "stroke-width": selected ? 4 : live ? 2.2 : 1.5, "stroke-dasharray": live ? null : "2 2" }));
    g.append(svgEl(doc, "circle", { cx: x(pt.x), cy: y(pt.y), r: selected ? 6 : live ? 4.5 : 3, fill: live ? colour : "#fff", stroke: selected ? "#000" : live ? "#fff" : DEAD }));
    const box = labelOf.get(i);
    if (box) g.append(svgEl(doc, "text", { class: "cw-feature-label", x: box.x + box.w / 2, y: box.y + box.h - 3.5, "text-anchor": "middle", ...AXIS_TEXT }, String(i)));
    svgTitle(doc, g, live ? `feature ${i}: ‖W_${i}‖ = ${fmt(s.norms[i] ?? 0, 3)}, superposition ${fmt(s.superposition[i] ?? 0, 3)}, b = ${fmt(s.b[i] ?? 0, 3)}` : `feature ${i}: not represented (‖W_${i}‖ = ${fmt(s.norms[i] ?? 0, 3)} ≤ ${REPRESENTED})`);
    svg.append(g);
  });
  return svg;
}

/** What the arrows' colours mean: one swatch per feature, feature 0 (the most important) darkest; grey dashed: dead. */
export function arrowLegend(doc: Document, n: number): SVGSVGElement {
  const width = 250;
  const svg = svgEl(doc, "svg", { class: "cw-arrow-legend", width, height: 40, viewBox: `0 0 ${width} 40`, role: "img", "aria-label": "arrow colours: feature importance" });
  svg.append(svgEl(doc, "text", { x: 4, y: 11, ...AXIS_TEXT }, "arrow colour: importance (feature 0 most important)"));
  const w = Math.min(14, (width - 60) / Math.max(1, n));
  for (let i = 0; i < n; i++) svg.append(svgEl(doc, "rect", { x: 4 + i * w, y: 16, width: w, height: 9, fill: featureColour(i, n) }));
  svg.append(svgEl(doc, "text", { x: 4, y: 37, ...AXIS_TEXT }, "0"), svgEl(doc, "text", { x: 4 + n * w, y: 37, "text-anchor": "end", ...AXIS_TEXT }, String(n - 1)));
  svg.append(svgEl(doc, "line", { x1: 4 + n * w + 10, x2: 4 + n * w + 26, y1: 21, y2: 21, stroke: DEAD, "stroke-width": 1.5, "stroke-dasharray": "2 2" }));
  svg.append(svgEl(doc, "text", { x: 4 + n * w + 30, y: 25, ...AXIS_TEXT }, "dead"));
  return svg;
}

/**
 * WᵀW as a diverging heatmap on a scale fixed over the whole training run (`gramLimit`, so step 0 looks as faint
 * as it is), beside each feature's norm as a bar coloured by its superposition and its bias `b_i`; a feature that
 * is not represented is drawn grey (its superposition is not defined). Both colour scales have their bar.
 */
export function gramChart(doc: Document, s: Shown): SVGSVGElement {
  const cell = Math.max(10, Math.min(32, Math.floor(220 / Math.max(1, s.n))));
  const left = 26;
  const top = 18;
  const barLeft = left + s.n * cell + 18;
  const barWidth = 120;
  const bLeft = barLeft + barWidth + 40;
  const width = Math.max(bLeft + 50, 2 * 230 + 20);
  const gridBottom = top + s.n * cell + 18;
  const height = gridBottom + 50;
  const svg = frame(doc, width, height, "WᵀW, per-feature norms coloured by superposition, and b");
  const limit = s.gramLimit > 0 ? s.gramLimit : 1;
  svg.append(svgEl(doc, "text", { x: left, y: 12, ...AXIS_TEXT }, "WᵀW"));
  svg.append(svgEl(doc, "text", { x: barLeft, y: 12, ...AXIS_TEXT }, "‖W_i‖ (colour: superposition)"));
  svg.append(svgEl(doc, "text", { x: bLeft, y: 12, ...AXIS_TEXT }, "b_i"));
  for (let i = 0; i < s.n; i++) {
    const row = svgEl(doc, "g", { class: "cw-feature", "data-cw-feature": i });
    const yy = top + i * cell;
    row.append(svgEl(doc, "text", { x: left - 5, y: yy + cell / 2 + 4, "text-anchor": "end", ...AXIS_TEXT, "font-weight": i === s.selected ? 700 : 400 }, String(i)));
    for (let j = 0; j < s.n; j++) {
      const v = s.gram[i * s.n + j] ?? 0;
      const rect = svgEl(doc, "rect", { x: left + j * cell, y: yy, width: cell, height: cell, fill: lutCss(DIVERGING, divergingIndex(v, limit)), stroke: "#fff", "stroke-width": 0.5 });
      svgTitle(doc, rect, `(WᵀW)[${i}, ${j}] = ${fmt(v, 3)}`);
      row.append(rect);
    }
    const norm = s.norms[i] ?? 0;
    const sup = s.superposition[i] ?? 0;
    const live = alive(s, i);
    const bar = svgEl(doc, "rect", {
      class: live ? "cw-norm-bar" : "cw-norm-bar cw-dead", x: barLeft, y: yy + 2, width: Math.max(0.5, (barWidth * Math.min(norm, 1.5)) / 1.5), height: cell - 4,
      fill: live ? lutCss(SUPERPOSITION_LUT, sequentialIndex(sup)) : DEAD, "data-cw-norm": norm.toFixed(4), "data-cw-superposition": sup.toFixed(4),
    });
    svgTitle(doc, bar, live ? `feature ${i}: ‖W_${i}‖ = ${fmt(norm, 3)}; superposition Σ_{j≠${i}} (Ŵ_${i}·W_j)² = ${fmt(sup, 3)}` : `feature ${i}: not represented (‖W_${i}‖ = ${fmt(norm, 3)} ≤ ${REPRESENTED}): no direction, so no superposition`);
    const bias = s.b[i] ?? 0;
    row.append(bar, svgEl(doc, "text", { x: barLeft + barWidth + 4, y: yy + cell / 2 + 4, ...AXIS_TEXT, fill: live ? "#444" : "#999" }, live ? fmt(norm, 2) : `${fmt(norm, 2)} dead`));
    const bText = svgEl(doc, "text", { class: "cw-bias", x: bLeft, y: yy + cell / 2 + 4, ...AXIS_TEXT, "data-cw-bias": bias.toFixed(4) }, `${bias >= 0 ? "+" : ""}${fmt(bias, 2)}`);
    svgTitle(doc, bText, `b_${i} = ${fmt(bias, 4)}: the output bias of feature ${i} (x'_${i} = ReLU(W_${i}ᵀ h + b_${i}))`);
    row.append(bText);
    if (i === s.selected) row.append(svgEl(doc, "rect", { x: left - 1, y: yy, width: s.n * cell + 2, height: cell, fill: "none", stroke: "#000", "stroke-width": 1.5 }));
    svg.append(row);
  }
  const one = barLeft + barWidth / 1.5;
  svg.append(svgEl(doc, "line", { x1: one, x2: one, y1: top - 2, y2: top + s.n * cell + 2, stroke: "#999", "stroke-dasharray": "2 2" }));
  svg.append(svgEl(doc, "text", { x: one, y: top + s.n * cell + 14, "text-anchor": "middle", ...AXIS_TEXT }, "1"));
  // the two colour bars: WᵀW's, fixed over the run, and the superposition's (0 to 1, more is yellow)
  const gramBar = colourBar(doc, DIVERGING, -limit, limit, "WᵀW (scale fixed over training)", 230);
  gramBar.setAttribute("x", "0");
  gramBar.setAttribute("y", String(gridBottom));
  gramBar.classList.add("cw-gram-bar");
  const supBar = colourBar(doc, SUPERPOSITION_LUT, 0, 1, "superposition (≥ 1 yellow; grey: dead)", 230);
  supBar.setAttribute("x", "240");
  supBar.setAttribute("y", String(gridBottom));
  supBar.classList.add("cw-superposition-bar");
  svg.append(gramBar, supBar);
  return svg;
}

/** Log-scale x axis from 1 to `max`, ticks at powers of 10 (and 3×). */
function logAxis(doc: Document, g: SVGGElement, x: (v: number) => number, max: number, y0: number): void {
  for (const t of [1, 3, 10, 30, 100, 300, 1000].filter((t) => t <= max * 1.001)) {
    g.append(svgEl(doc, "line", { x1: x(t), x2: x(t), y1: y0, y2: y0 + 4, stroke: "#888" }));
    g.append(svgEl(doc, "text", { x: x(t), y: y0 + 15, "text-anchor": "middle", ...AXIS_TEXT }, String(t)));
  }
}

/** Feature dimensionality D_i against 1/(1 − S) over one decay column of the grid, sticky fractions drawn. */
export function dimensionalityChart(
  doc: Document,
  probabilities: Float32Array,
  dims: NDArray,
  norms: NDArray,
  d: number,
  t: number,
  current: { x: number; values: Float32Array; norms: Float32Array } | null,
  selected: number,
): SVGSVGElement {
  const width = 300;
  const height = 220;
  const [left, right, top, bottom] = [40, 40, 10, 40];
  const svg = frame(doc, width, height, "feature dimensionality against 1/(1 − S)");
  const max = Math.max(2, ...Array.from(probabilities, (p) => 1 / p));
  const lx = linearScale([-0.06, Math.log10(max) + 0.06], [left, width - right]); // padded: points at 1 clear the axis
  const x = (v: number) => lx(Math.log10(v));
  const y = linearScale([0, 1.1], [height - bottom, top]);
  const g = svgEl(doc, "g");
  g.append(svgEl(doc, "line", { x1: left, x2: width - right, y1: y(0), y2: y(0), stroke: "#888" }));
  g.append(svgEl(doc, "line", { x1: left, x2: left, y1: y(0), y2: y(1.1), stroke: "#888" }));
  logAxis(doc, g, x, max, y(0));
  for (const f of STICKY_FRACTIONS) {
    g.append(svgEl(doc, "line", { class: "cw-sticky", x1: left, x2: width - right, y1: y(f.value), y2: y(f.value), stroke: "#bbb", "stroke-dasharray": "4 3" }));
    g.append(svgEl(doc, "text", { x: width - right + 4, y: y(f.value) + 4, ...AXIS_TEXT }, f.label));
  }
  g.append(svgEl(doc, "text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle", ...AXIS_TEXT }, "1/(1 − S)  (log scale)"));
  g.append(svgEl(doc, "text", { x: 12, y: (top + height - bottom) / 2, transform: `rotate(-90 12 ${(top + height - bottom) / 2})`, "text-anchor": "middle", ...AXIS_TEXT }, "dimensionality D_i"));
  for (const pt of dimensionalityPoints(probabilities, dims, norms, d, t)) {
    const dot = svgEl(doc, "circle", { class: "cw-dim-point", cx: x(pt.x), cy: y(pt.y), r: 3, fill: featureColour(pt.feature, dims.shape[3] ?? 1), opacity: 0.75 });
    svgTitle(doc, dot, `1/(1 − S) = ${fmt(pt.x, 1)}, feature ${pt.feature}: D = ${fmt(pt.y, 3)}`);
    g.append(dot);
  }
  if (current !== null) {
    current.values.forEach((v, i) => {
      if ((current.norms[i] ?? 0) <= REPRESENTED) return;
      g.append(svgEl(doc, "circle", { class: "cw-dim-current", "data-cw-feature": i, cx: x(current.x), cy: y(v), r: i === selected ? 6 : 4.5, fill: "none", stroke: "#000", "stroke-width": i === selected ? 2 : 1 }));
    });
  }
  svg.append(g);
  return svg;
}

/** The phase diagram of one extra feature: cells coloured by phase, density left (dense) to right (sparse). */
export function phaseChart(doc: Document, densities: Float32Array, ratios: Float32Array, phase: NDArray, norm: NDArray): SVGSVGElement {
  const cell = 26;
  const [left, top] = [58, 8];
  const width = Math.max(left + densities.length * cell + 10, left + 190);
  const height = top + ratios.length * cell + 46 + PHASES.length * 15;
  const svg = frame(doc, width, height, "phase diagram of one extra feature");
  for (let r = 0; r < ratios.length; r++) {
    const yy = top + (ratios.length - 1 - r) * cell;
    svg.append(svgEl(doc, "text", { x: left - 4, y: yy + cell / 2 + 4, "text-anchor": "end", ...AXIS_TEXT }, fmt(ratios[r] ?? 0, (ratios[r] ?? 0) < 1 ? 2 : 1)));
    for (let q = 0; q < densities.length; q++) {
      const code = phase.data[r * densities.length + q] ?? 0;
      const rect = svgEl(doc, "rect", { class: "cw-phase", "data-cw-phase": code, x: left + q * cell, y: yy, width: cell, height: cell, fill: PHASES[code]?.colour ?? "#fff", stroke: "#fff" });
      svgTitle(doc, rect, `1 − S = ${fmt(densities[q] ?? 0, 3)}, relative importance ${fmt(ratios[r] ?? 0, 2)}: ${PHASES[code]?.name ?? "?"} (extra feature's norm ${fmt(norm.data[r * densities.length + q] ?? 0, 2)})`);
      svg.append(rect);
    }
  }
  densities.forEach((dn, q) => {
    if (q % 2 === 0) svg.append(svgEl(doc, "text", { x: left + q * cell + cell / 2, y: top + ratios.length * cell + 13, "text-anchor": "middle", ...AXIS_TEXT }, fmt(dn, dn < 0.1 ? 2 : 1)));
  });
  const axisY = top + ratios.length * cell + 30;
  svg.append(svgEl(doc, "text", { x: left + (densities.length * cell) / 2, y: axisY, "text-anchor": "middle", ...AXIS_TEXT }, "feature probability 1 − S"));
  PHASES.forEach((phase, k) => {
    const yy = axisY + 10 + k * 15;
    svg.append(svgEl(doc, "rect", { x: left, y: yy, width: 11, height: 11, fill: phase.colour, stroke: "#999", "stroke-width": 0.5 }));
    svg.append(svgEl(doc, "text", { class: "cw-phase-legend", x: left + 16, y: yy + 9.5, ...AXIS_TEXT }, `extra feature: ${phase.name}`));
  });
  svg.append(svgEl(doc, "text", { x: 10, y: top + (ratios.length * cell) / 2, transform: `rotate(-90 10 ${top + (ratios.length * cell) / 2})`, "text-anchor": "middle", ...AXIS_TEXT }, ratios.length * cell >= 120 ? "relative importance" : "importance"));
  return svg;
}
