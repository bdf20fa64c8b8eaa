// The eigenvalue scatter's side panel: the selected head's eigenvalues in the
// complex plane (OV and the chosen QK circuit), their colour key, and its
// detector scores as bars.

import { DETECTORS, detectorAt, type EigenData, eigenScore, headEigenvalues } from "../../lib/eigen";
import { el } from "../../lib/dom";
import { fmt, headName, linearScale, svgEl, svgTitle } from "../../lib/svg";

/** Colours of eigenvalues with positive and negative real part (RdBu ends). */
const POSITIVE = "#b2182b";
const NEGATIVE = "#2166ac";

/** One head's eigenvalues of circuit `c` in the complex plane, titled `title`, with their Σλ/Σ|λ| below. */
export function drawComplex(doc: Document, d: EigenData, c: number, sel: { layer: number; head: number }, title: string): HTMLDivElement {
  const box = el(doc, "div", "cw-complex");
  const eigs = headEigenvalues(d, c, sel.layer, sel.head);
  const size = 176;
  const top = 18; // the plot's title
  const right = 16; // room right of the plane for the "Re" axis name, outside it, where no eigenvalue is drawn
  const svg = svgEl(doc, "svg", { width: size + 8 + right, height: size + 8 + top, viewBox: `-4 ${-4 - top} ${size + 8 + right} ${size + 8 + top}`, role: "img", "aria-label": `${title}: eigenvalues in the complex plane` });
  svg.append(svgEl(doc, "text", { class: "cw-complex-title", x: 0, y: -6, "font-size": 11.5, "font-weight": 600, fill: "#222" }, `${title} eigenvalues λ`));
  const r = Math.max(1e-12, ...eigs.map(([re, im]) => Math.hypot(re, im)));
  const s = linearScale([-r * 1.08, r * 1.08], [0, size]);
  const sy = linearScale([-r * 1.08, r * 1.08], [size, 0]);
  svg.append(svgEl(doc, "rect", { x: 0, y: 0, width: size, height: size, fill: "#fafafa", stroke: "#ddd" }));
  svg.append(svgEl(doc, "line", { x1: s(0), x2: s(0), y1: 0, y2: size, stroke: "#ccc" }));
  svg.append(svgEl(doc, "line", { x1: 0, x2: size, y1: sy(0), y2: sy(0), stroke: "#ccc" }));
  svg.append(svgEl(doc, "circle", { cx: s(0), cy: sy(0), r: s(r) - s(0), fill: "none", stroke: "#e5e5e5", "stroke-dasharray": "2 2" }));
  for (const [re, im] of eigs) {
    const dot = svgEl(doc, "circle", { cx: s(re), cy: sy(im), r: 3, fill: re >= 0 ? POSITIVE : NEGATIVE, "fill-opacity": 0.75 });
    svgTitle(doc, dot, `λ = ${fmt(re, 3)}${im >= 0 ? " + " : " − "}${fmt(Math.abs(im), 3)}i`);
    svg.append(dot);
  }
  // outside the plane at the real axis's end: inside it, eigenvalues near the axis (a copying head's) cover it
  svg.append(svgEl(doc, "text", { class: "cw-axis-name", x: size + 2, y: sy(0) + 3, "font-size": 9, fill: "#888" }, "Re"));
  svg.append(svgEl(doc, "text", { x: s(0) + 3, y: 9, "font-size": 9, fill: "#888" }, "Im"));
  const caption = el(doc, "div", "cw-note");
  caption.textContent = eigs.length ? `${title}: Σλ/Σ|λ| = ${fmt(eigenScore(eigs))}, |λ| ≤ ${r.toPrecision(3)}` : `${title}: none (no earlier head)`;
  box.append(svg, caption);
  return box;
}

/** The key of the complex-plane plots' two colours. */
export function eigenKey(doc: Document): SVGSVGElement {
  const key = svgEl(doc, "svg", { class: "cw-eig-key", width: 270, height: 16, viewBox: "0 0 270 16", role: "img", "aria-label": "colour key of the eigenvalue plots" });
  key.append(
    svgEl(doc, "circle", { cx: 5, cy: 8, r: 3.5, fill: POSITIVE, "fill-opacity": 0.75 }),
    svgEl(doc, "text", { x: 13, y: 12, "font-size": 11, fill: "#333" }, "Re λ ≥ 0 (copying)"),
    svgEl(doc, "circle", { cx: 131, cy: 8, r: 3.5, fill: NEGATIVE, "fill-opacity": 0.75 }),
    svgEl(doc, "text", { x: 139, y: 12, "font-size": 11, fill: "#333" }, "Re λ < 0 (anti-copying)"),
  );
  return key;
}

/** The selected head's detector scores as bars from 0 to 1, value written at the end. */
export function drawDetectors(doc: Document, d: EigenData, sel: { layer: number; head: number }): SVGSVGElement {
  const W = 250;
  const row = 20;
  const svg = svgEl(doc, "svg", { width: W, height: row * DETECTORS.length + 6 });
  const x = linearScale([0, 1], [104, W - 44]);
  DETECTORS.forEach((det, k) => {
    const v = detectorAt(d, k, sel.layer, sel.head);
    const y0 = 3 + k * row;
    svg.append(svgEl(doc, "text", { x: 0, y: y0 + 13, "font-size": 11.5, fill: "#333" }, det.label));
    svg.append(svgEl(doc, "rect", { x: x(0), y: y0 + 3, width: x(1) - x(0), height: 12, fill: "#eee" }));
    svg.append(svgEl(doc, "rect", { x: x(0), y: y0 + 3, width: Math.max(0, x(Math.min(1, Math.max(0, v))) - x(0)), height: 12, fill: "#0072B2" }));
    svg.append(svgEl(doc, "text", { x: W - 2, y: y0 + 13, "text-anchor": "end", "font-size": 11.5, fill: "#222", "font-variant-numeric": "tabular-nums" }, fmt(v)));
  });
  return svg;
}

/** The whole side panel of head `sel`: title, the two complex-plane plots, their key, the detectors. */
export function drawSide(doc: Document, d: EigenData, sel: { layer: number; head: number }, qkIndex: number): Element[] {
  const heading = el(doc, "div", "cw-side-title", `${headName(sel.layer, sel.head)}: eigenvalues`);
  const pair = el(doc, "div", "cw-complex-pair");
  let qkTitle = "QK";
  if (qkIndex === 2) {
    const at = (sel.layer * d.nHeads + sel.head) * 2;
    const src = [d.kcompSource.data[at] as number, d.kcompSource.data[at + 1] as number];
    qkTitle = src[0] !== undefined && src[0] >= 0 ? `QK via ${headName(src[0], src[1] as number)}` : "QK via K-comp.";
  }
  pair.append(drawComplex(doc, d, 0, sel, "OV"), drawComplex(doc, d, qkIndex, sel, qkTitle));
  const detTitle = el(doc, "div", "cw-side-title cw-detector-title", "Detector scores (attention on repeated random tokens)");
  const key = eigenKey(doc);
  return [heading, pair, key, detTitle, drawDetectors(doc, d, sel)];
}
