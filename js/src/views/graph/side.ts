// The graph view's side panel: the legend and the faithfulness curve.

import { el } from "../../lib/dom";
import { SIGN_WORDS } from "../../lib/colour";
import { curveValueAt, curveX, edgeColour, edgeWidth } from "../../lib/graphview";
import { fmt, svgEl, svgTitle } from "../../lib/svg";

/** Ring colour of a pinned node (Okabe–Ito orange). */
export const PIN = "#E69F00";

/** The legend: edge colours by sign, width by |weight|, node size, pins. */
export function legend(doc: Document, max: number, negative: string, positive: string, perPosition: boolean): SVGSVGElement {
  const svg = svgEl(doc, "svg", { width: 380, height: 100, class: "cw-graph-legend" });
  const rows: [string, string][] = [
    [edgeColour(1), `${SIGN_WORDS.positive}, ${positive}`],
    [edgeColour(-1), `${SIGN_WORDS.negative}, ${negative}`],
  ];
  rows.forEach(([colour, text], k) => {
    svg.append(svgEl(doc, "line", { x1: 4, x2: 28, y1: 10 + k * 16, y2: 10 + k * 16, stroke: colour, "stroke-width": 3 }));
    svg.append(svgEl(doc, "text", { x: 34, y: 14 + k * 16, "font-size": 10, fill: "#333", class: "cw-sign-legend" }, text));
  });
  svg.append(svgEl(doc, "line", { x1: 4, x2: 28, y1: 46, y2: 46, stroke: "#888", "stroke-width": edgeWidth(max, max) }));
  svg.append(svgEl(doc, "text", { x: 34, y: 50, "font-size": 10, fill: "#333" }, `width: |weight| (widest ${fmt(max, 3)})`));
  const third = perPosition ? "node size: influence on the logits" : "q k v under a head: its query, key, value inputs";
  svg.append(svgEl(doc, "text", { x: 4, y: 66, "font-size": 10, fill: "#333" }, third));
  svg.append(svgEl(doc, "circle", { cx: 10, cy: 82, r: 6, fill: "#fdf2d9", stroke: PIN, "stroke-width": 2.5 }));
  svg.append(svgEl(doc, "text", { x: 22, y: 86, "font-size": 10, fill: "#333" }, "pinned (shift-click); shaded: in a supernode"));
  return svg;
}

/** The faithfulness curve over circuit sizes (log axis) with the shown size `n` marked. */
export function curve(doc: Document, xs: readonly number[], ys: readonly number[], n: number, total: number): SVGSVGElement | HTMLElement {
  if (!xs.length) return el(doc, "div", "cw-note", "");
  const W = 260;
  const H = 190;
  const x0 = 40;
  const x1 = W - 10;
  const lo = Math.min(0, ...ys);
  const hi = Math.max(1, ...ys);
  const y = (v: number) => 12 + ((hi - v) / (hi - lo)) * (H - 44);
  const svg = svgEl(doc, "svg", { width: W, height: H, class: "cw-curve", role: "img" });
  svgTitle(doc, svg, "faithfulness against edges kept (log scale)");
  for (const t of [0, 0.5, 1]) {
    svg.append(svgEl(doc, "line", { x1: x0, x2: x1, y1: y(t), y2: y(t), stroke: t === 1 ? "#999" : "#e4e4e4", "stroke-dasharray": t === 1 ? "3 3" : "" }));
    svg.append(svgEl(doc, "text", { x: x0 - 4, y: y(t) + 3.5, "text-anchor": "end", "font-size": 10, fill: "#555" }, fmt(t, 1)));
  }
  for (const e of [1, 10, 100, 1000, 10000].filter((e) => e <= total)) {
    svg.append(svgEl(doc, "text", { x: curveX(e, total, x0, x1), y: H - 20, "text-anchor": "middle", "font-size": 10, fill: "#555" }, String(e)));
  }
  svg.append(svgEl(doc, "text", { x: (x0 + x1) / 2, y: H - 6, "text-anchor": "middle", "font-size": 10, fill: "#333" }, "edges kept (log) → faithfulness"));
  const pts = xs.map((e, i) => `${curveX(e, total, x0, x1).toFixed(1)},${y(ys[i] as number).toFixed(1)}`);
  svg.append(svgEl(doc, "polyline", { points: pts.join(" "), fill: "none", stroke: "#0072B2", "stroke-width": 1.5 }));
  xs.forEach((e, i) => {
    const dot = svgEl(doc, "circle", { cx: curveX(e, total, x0, x1), cy: y(ys[i] as number), r: 3, fill: "#0072B2", class: "cw-curve-point", "data-cw-size": e });
    svgTitle(doc, dot, `${e} edges: faithfulness ${fmt(ys[i] as number, 3)}`);
    svg.append(dot);
  });
  const mx = curveX(n, total, x0, x1);
  svg.append(svgEl(doc, "line", { x1: mx, x2: mx, y1: 8, y2: H - 32, stroke: "#111", "stroke-width": 1.5, class: "cw-curve-marker", "data-cw-size": n }));
  const at = curveValueAt(xs, ys, n);
  svg.append(svgEl(doc, "text", { x: Math.min(mx + 4, x1 - 60), y: 10, "font-size": 10, fill: "#111", class: "cw-curve-label" }, at === null ? `${n} edges` : `${n} edges: ${fmt(at, 3)}`));
  return svg;
}
