// The superposition view's four charts, each a function of one model's
// measurements (computed by the kernel) to an SVG. Presentation in attributes,
// text as text; every feature mark carries `data-cw-feature` for selection.

import type { NDArray } from "../../lib/arrays";
import { DIVERGING, divergingIndex, lutCss, makeLut, sequentialIndex, VIRIDIS } from "../../lib/colour";
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
  selected: number;
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
  points.forEach((pt, i) => {
    const selected = i === s.selected;
    const g = svgEl(doc, "g", { class: "cw-feature", "data-cw-feature": i, "data-cw-x": pt.x.toFixed(4), "data-cw-y": pt.y.toFixed(4) });
    const colour = featureColour(i, s.n);
    g.append(svgEl(doc, "line", { x1: x(0), y1: y(0), x2: x(pt.x), y2: y(pt.y), stroke: colour, "stroke-width": selected ? 4 : 2.2 }));
    g.append(svgEl(doc, "circle", { cx: x(pt.x), cy: y(pt.y), r: selected ? 6 : 4.5, fill: colour, stroke: selected ? "#000" : "#fff" }));
    if ((s.norms[i] ?? 0) > REPRESENTED) {
      const k = 1 + 12 / Math.max(1e-6, Math.hypot(x(pt.x) - x(0), y(pt.y) - y(0)));
      g.append(svgEl(doc, "text", { x: x(0) + (x(pt.x) - x(0)) * k, y: y(0) + (y(pt.y) - y(0)) * k + 4, "text-anchor": "middle", ...AXIS_TEXT }, String(i)));
    }
    svgTitle(doc, g, `feature ${i}: ‖W_${i}‖ = ${fmt(s.norms[i] ?? 0, 3)}, superposition ${fmt(s.superposition[i] ?? 0, 3)}`);
    svg.append(g);
  });
  return svg;
}

/** WᵀW as a diverging heatmap, beside each feature's norm as a bar coloured by its superposition. */
export function gramChart(doc: Document, s: Shown): SVGSVGElement {
  const cell = Math.max(10, Math.min(32, Math.floor(220 / Math.max(1, s.n))));
  const left = 26;
  const top = 18;
  const barLeft = left + s.n * cell + 18;
  const barWidth = 120;
  const width = barLeft + barWidth + 40;
  const height = top + s.n * cell + 36;
  const svg = frame(doc, width, height, "WᵀW and per-feature norms coloured by superposition");
  let limit = 1;
  for (const v of s.gram) limit = Math.max(limit, Math.abs(v));
  svg.append(svgEl(doc, "text", { x: left, y: 12, ...AXIS_TEXT }, "WᵀW"));
  svg.append(svgEl(doc, "text", { x: barLeft, y: 12, ...AXIS_TEXT }, "‖W_i‖ (colour: superposition)"));
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
    const bar = svgEl(doc, "rect", {
      class: "cw-norm-bar", x: barLeft, y: yy + 2, width: Math.max(0.5, (barWidth * Math.min(norm, 1.5)) / 1.5), height: cell - 4,
      fill: lutCss(SUPERPOSITION_LUT, sequentialIndex(sup)), "data-cw-norm": norm.toFixed(4), "data-cw-superposition": sup.toFixed(4),
    });
    svgTitle(doc, bar, `feature ${i}: ‖W_${i}‖ = ${fmt(norm, 3)}; superposition Σ_{j≠${i}} (Ŵ_${i}·W_j)² = ${fmt(sup, 3)}`);
    row.append(bar, svgEl(doc, "text", { x: barLeft + barWidth + 4, y: yy + cell / 2 + 4, ...AXIS_TEXT }, fmt(norm, 2)));
    if (i === s.selected) row.append(svgEl(doc, "rect", { x: left - 1, y: yy, width: s.n * cell + 2, height: cell, fill: "none", stroke: "#000", "stroke-width": 1.5 }));
    svg.append(row);
  }
  const one = barLeft + barWidth / 1.5;
  svg.append(svgEl(doc, "line", { x1: one, x2: one, y1: top - 2, y2: top + s.n * cell + 2, stroke: "#999", "stroke-dasharray": "2 2" }));
  svg.append(svgEl(doc, "text", { x: one, y: top + s.n * cell + 14, "text-anchor": "middle", ...AXIS_TEXT }, "1"));
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
