// The eigenvalue scatter itself: every head at (OV score, QK score), coloured
// by layer, the selected head ringed and named, labels placed clear of every
// dot, ring and other label, and a hover label for heads left unnamed.

import { coincident, type EigenData, type LabelWish, type Obstacle, type PlacedHead, placeLabels, pointRadius, scatterPoints, scoreDomain, stripRows } from "../../lib/eigen";
import { drawAxes, fmt, headName, linearScale, svgEl, svgTitle } from "../../lib/svg";

export const PLOT = { width: 380, height: 390, left: 54, right: 14, top: 26, bottom: 46, strip: 34 };
/** Extra height of each further row of the "n/a" strip, and the selection ring's radius. */
const STRIP_ROW = 11;
export const RING = 11;
/** Height (px) added above the strip's note so that labels under the strip's lowest heads never reach it. */
const NOTE_ROOM = 10;
/** Most labels drawn at once: beyond it only the selected head is named (and any head on hover). */
const LABEL_ALL_MAX = 48;
/** Colour of heads outside the emphasised layer. */
const MUTED = "#c9c9c9";

export interface ScatterOptions {
  /** Index of the score definition in `d.scores`, and its name. */
  methodIndex: number;
  method: string;
  qk: "qk" | "qk_kcomp";
  selected: { layer: number; head: number };
  colour: (layer: number) => string;
  /** The layer drawn in colour and named (others grey), or null for all layers. */
  emphasis: number | null;
}

type Wish = LabelWish & { text: string; selected: boolean; px: number; py: number; id: string };

/** The scatter as an SVG element. Points are `[data-cw-head="l.h"]` groups; labels `text.cw-label`. */
export function drawScatter(doc: Document, d: EigenData, o: ScatterOptions): SVGSVGElement {
  const sel = o.selected;
  const points = scatterPoints(d, o.methodIndex, o.qk);
  const hasStrip = points.some((p) => Number.isNaN(p.y));
  const W = PLOT.width;
  const H = PLOT.height + (hasStrip ? PLOT.strip : 0);
  const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "OV and QK copying scores of every head" });
  const [lo, hi] = scoreDomain(o.method);
  const pad = (hi - lo) * 0.04;
  const x = linearScale([lo - pad, hi + pad], [PLOT.left, W - PLOT.right]);
  const y = linearScale([lo - pad, hi + pad], [PLOT.height - PLOT.bottom, PLOT.top]);
  const axes = svgEl(doc, "g");
  const ticks = o.method === "eigen" ? [-1, -0.5, 0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1];
  drawAxes(doc, axes, x, y, {
    xLabel: "OV copying score",
    yLabel: o.qk === "qk" ? "QK matching score (token ↔ token)" : "QK matching score (via K-composition)",
    xTicks: ticks,
    yTicks: ticks,
    grid: true,
  });
  svg.append(axes);
  if (o.method === "eigen") {
    svg.append(svgEl(doc, "text", { x: x(1), y: 12, "text-anchor": "end", "font-size": 10.5, fill: "#777", "font-style": "italic" }, "copying & matching ↗"));
  }
  const stripY = PLOT.height + 8;
  // heads with no vertical value sit on a strip below, dodged into rows so none hides another
  const stripPoints = points.filter((p) => Number.isNaN(p.y) && Number.isFinite(p.x));
  const rowsOf = stripRows(stripPoints.map((p) => x(p.x)), 13);
  const stripRow = new Map(stripPoints.map((p, i) => [`${p.layer}.${p.head}`, rowsOf[i] as number]));
  // the strip's note sits below a row kept for the labels of its lowest heads; labels stay above the note
  let labelFloor = H;
  if (hasStrip) {
    const extra = Math.max(0, Math.max(0, ...rowsOf) * STRIP_ROW) + NOTE_ROOM;
    labelFloor = stripY + extra + 20 - 10;
    svg.setAttribute("height", String(H + extra));
    svg.setAttribute("viewBox", `0 0 ${W} ${H + extra}`);
    svg.append(svgEl(doc, "line", { x1: PLOT.left, x2: W - PLOT.right, y1: stripY, y2: stripY, stroke: "#ddd", "stroke-dasharray": "3 3" }));
    svg.append(svgEl(doc, "text", { x: PLOT.left - 6, y: stripY + 4, "text-anchor": "end", "font-size": 10.5, fill: "#777" }, "n/a"));
    svg.append(svgEl(doc, "text", { x: W - PLOT.right, y: stripY + extra + 20, "text-anchor": "end", "font-size": 10, fill: "#888" }, "layer 0: no earlier head to compose with"));
  }

  const isSelected = (p: { layer: number; head: number }) => p.layer === sel.layer && p.head === sel.head;
  const inFocus = (p: { layer: number }) => o.emphasis === null || p.layer === o.emphasis;
  const focusCount = points.filter(inFocus).length;
  const labelAll = focusCount <= LABEL_ALL_MAX;
  const r = pointRadius(focusCount);
  // drawn back to front: muted heads, the emphasised ones, the selected head last (on top)
  const rank = (p: { layer: number; head: number }) => (isSelected(p) ? 2 : inFocus(p) ? 1 : 0);
  const ordered = [...points].sort((a, b) => rank(a) - rank(b));
  const placed: PlacedHead[] = ordered
    .filter((p) => Number.isFinite(p.x))
    .map((p) => ({
      id: `${p.layer}.${p.head}`,
      x: x(p.x),
      y: Number.isNaN(p.y) ? stripY + (stripRow.get(`${p.layer}.${p.head}`) ?? 0) * STRIP_ROW : y(p.y),
    }));
  const wishes: Wish[] = [];
  const obstacles: Obstacle[] = [];
  for (const p of ordered) {
    if (!Number.isFinite(p.x)) continue;
    const selected = isSelected(p);
    const focus = inFocus(p);
    const px = x(p.x);
    const py = Number.isNaN(p.y) ? stripY + (stripRow.get(`${p.layer}.${p.head}`) ?? 0) * STRIP_ROW : y(p.y);
    const name = headName(p.layer, p.head);
    const g = svgEl(doc, "g", { class: "cw-point", "data-cw-head": `${p.layer}.${p.head}`, "data-cw-x": px.toFixed(1), "data-cw-y": py.toFixed(1), tabindex: 0, "aria-label": name });
    if (selected) g.append(svgEl(doc, "circle", { class: "cw-ring", cx: px, cy: py, r: RING, fill: "none", stroke: "#222", "stroke-width": 2 }));
    const radius = selected ? 7 : focus ? r : Math.min(r, 3.5);
    g.append(
      svgEl(doc, "circle", {
        class: "cw-mark",
        cx: px,
        cy: py,
        r: radius,
        fill: focus || selected ? o.colour(p.layer) : MUTED,
        stroke: "#fff",
        "stroke-width": radius > 4 ? 1.2 : 0.8,
        "fill-opacity": Number.isNaN(p.y) ? 0.55 : 0.95,
      }),
    );
    const here = coincident(placed, { id: `${p.layer}.${p.head}`, x: px, y: py });
    const others = here.filter((id) => id !== `${p.layer}.${p.head}`).map((id) => headName(...(id.split(".").map(Number) as [number, number])));
    const shared = others.length ? ` (same point: ${others.join(", ")}; click again to cycle)` : "";
    svgTitle(doc, g, `${name}: OV ${fmt(p.x)}, QK ${Number.isNaN(p.y) ? "n/a" : fmt(p.y)}${shared}`);
    svg.append(g);
    obstacles.push({ x: px, y: py, r: selected ? RING + 2 : radius + 1.5 });
    if (selected || (labelAll && focus)) {
      // boxes a little larger than the glyphs (ascent + descent), so a drawn label stays inside its box
      wishes.push({ x: px, y: py, px, py, width: name.length * (selected ? 8.2 : 6.6), height: selected ? 15 : 12.5, clear: selected ? RING + 3 : 8, required: selected, text: name, selected, id: `${p.layer}.${p.head}` });
    }
  }
  svg.append(drawLabels(doc, wishes, obstacles, { x: 0, y: 0, width: W, height: labelFloor }));
  // the hovered head's name, drawn on top (every head is reachable this way)
  const hoverLabel = svgEl(doc, "g", { class: "cw-hover-label", "pointer-events": "none", visibility: "hidden" });
  hoverLabel.append(svgEl(doc, "rect", { rx: 2, fill: "#fff", "fill-opacity": 0.92, stroke: "#999", "stroke-width": 0.6 }), svgEl(doc, "text", { "font-size": 11, fill: "#111" }));
  svg.append(hoverLabel);
  return svg;
}

/**
 * The labels that find a spot: the selected head's first (it wins its spot,
 * farther out with a leader line when its neighbourhood is crowded), then the
 * others; a label with no spot clear of every dot, ring and label is left to
 * the hover label. A white halo keeps the selected name legible over dots.
 */
function drawLabels(doc: Document, wishes: Wish[], obstacles: Obstacle[], bounds: { x: number; y: number; width: number; height: number }): SVGGElement {
  const labels = svgEl(doc, "g", { class: "cw-labels" });
  wishes.sort((a, b) => Number(b.selected) - Number(a.selected));
  placeLabels(wishes, obstacles, bounds).forEach((box, i) => {
    const w = wishes[i] as Wish;
    if (box === null) return;
    const nx = Math.max(box.x, Math.min(w.px, box.x + box.width));
    const ny = Math.max(box.y, Math.min(w.py, box.y + box.height));
    const reach = Math.hypot(nx - w.px, ny - w.py);
    if (w.selected && reach > (w.clear ?? 7) + 12) {
      const k = (w.clear ?? 7) - 3;
      labels.append(svgEl(doc, "line", { class: "cw-leader", x1: w.px + ((nx - w.px) * k) / reach, y1: w.py + ((ny - w.py) * k) / reach, x2: nx, y2: ny, stroke: "#222", "stroke-width": 1 }));
    }
    labels.append(
      svgEl(
        doc,
        "text",
        {
          class: "cw-label",
          "data-cw-label": w.text,
          // a label selects its own head: heads drawn on one point (several induction heads at (1, 1)) are each
          // reachable by name, not only by cycling through the point
          "data-cw-label-head": w.id,
          cursor: "pointer",
          x: box.x,
          y: box.y + (w.selected ? 11.8 : 9.8),
          "font-size": w.selected ? 12 : 10,
          "font-weight": w.selected ? 600 : 400,
          fill: w.selected ? "#111" : "#555",
          stroke: w.selected ? "#fff" : null,
          "stroke-width": w.selected ? 3 : null,
          "stroke-linejoin": w.selected ? "round" : null,
          "paint-order": w.selected ? "stroke" : null,
        },
        w.text,
      ),
    );
  });
  return labels;
}

/** Place the hover label of the head under `target` (or hide it when none). */
export function showHoverLabel(svg: SVGSVGElement | null, target: Element | null): void {
  const label = svg?.querySelector<SVGGElement>(".cw-hover-label");
  if (!svg || !label) return;
  const g = target?.closest?.("[data-cw-head]");
  if (!g) {
    label.setAttribute("visibility", "hidden");
    return;
  }
  const [layer, head] = (g.getAttribute("data-cw-head") ?? "").split(".").map(Number);
  const px = Number(g.getAttribute("data-cw-x"));
  const py = Number(g.getAttribute("data-cw-y"));
  const name = headName(layer as number, head as number);
  const text = label.querySelector("text") as SVGTextElement;
  const rect = label.querySelector("rect") as SVGRectElement;
  const width = name.length * 7 + 8;
  const width0 = Number(svg.getAttribute("width")) || PLOT.width;
  const left = px + 10 + width > width0 ? px - 10 - width : px + 10;
  text.textContent = name;
  text.setAttribute("x", String(left + 4));
  text.setAttribute("y", String(py - 10));
  for (const [k, v] of Object.entries({ x: left, y: py - 22, width, height: 16 })) rect.setAttribute(k, String(v));
  label.setAttribute("visibility", "visible");
}
