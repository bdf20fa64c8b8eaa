// The composition map's three heatmaps (Q, K, V; rows earlier heads, columns
// later heads) on canvas, with a shared zoom: Ctrl/⌘ + wheel zooms at the
// pointer, a drag pans, buttons zoom in, out and back to the whole map. Axes
// shade layers as bands and name every k-th layer, then heads as cells widen
// (lib/heataxis.ts); cells wide enough carry their value; a colour bar with
// numbers sits below. At 32 × 32 heads each map holds 992 × 992 cells.

import { DIVERGING, type Lut, lutCss, textOn, VIRIDIS } from "../../lib/colour";
import { colourBar } from "../../lib/colourbar";
import { colourLimit, type CompWords, hasValues, heatmapCells } from "../../lib/composition";
import { el, listen } from "../../lib/dom";
import { noExport } from "../../lib/export";
import { type CompData, compValue, type Kind, KINDS } from "../../lib/graph";
import { type AxisMark, type HeadAxis, headAxis } from "../../lib/heataxis";
import { cellImage, sizeCanvas } from "../../lib/heatmap";
import { fmt, headName } from "../../lib/svg";
import { cellOf, centreOn, clampView, fullView, isFull, panBy, type Viewport, zoomAt } from "../../lib/viewport";

const MAP_MIN = 150;
const MAP_MAX = 300;
const MAP_CELL = 32;
/** Canvas margins (px) for the axes: a strip of layer bands, then a strip of head numbers. */
export const AXIS = { left: 46, top: 30, layerStrip: 25, headStrip: 18, layerRow: 14, headRow: 14 };
/** Cells at least this wide (px) carry their value. */
const VALUE_CELL = 30;
const FONT = "10px system-ui, sans-serif";
const EMPTY: readonly [number, number, number, number] = [236, 236, 236, 255];

export interface MapSelection {
  layer: number;
  head: number;
  edge: [number, number, number, number] | null;
  edgeKind: string;
}

/** Side of the cell area (px) for `n` cells a side. */
export function mapSize(n: number): number {
  return Math.min(MAP_MAX, Math.max(MAP_MIN, n * MAP_CELL));
}

/** A label box drawn on a map's canvas (CSS px), as tests read it from `data-cw-axis-labels`. */
interface LabelBox {
  text: string;
  x: number;
  y: number;
  w: number;
  h: number;
}

export function compositionMaps(
  doc: Document,
  on: { selectEdge(l1: number, h1: number, l2: number, h2: number, kind: string): void },
): { element: HTMLDivElement; legend: HTMLDivElement; load(d: CompData, words: CompWords): void; draw(d: CompData, sel: MapSelection, subtract: boolean, words: CompWords): void; cleanup(): void } {
  const column = el(doc, "div", "cw-maps-column");
  const zoomBar = noExport(el(doc, "div", "cw-zoom-bar"));
  const button = (text: string, title: string) => {
    const b = el(doc, "button", "cw-button cw-small", text);
    b.type = "button";
    b.title = title;
    return b;
  };
  const zoomIn = button("+", "Zoom in (Ctrl/⌘ + wheel over a map zooms at the pointer)");
  const zoomOut = button("−", "Zoom out");
  const whole = button("Whole map", "Show every head again");
  zoomBar.append(zoomOut, zoomIn, whole, el(doc, "span", "cw-hint", "Ctrl/⌘ + wheel zooms, drag pans"));
  const windowText = el(doc, "div", "cw-map-window");
  const maps = el(doc, "div", "cw-maps");
  const barBox = el(doc, "div", "cw-bar-box");
  // the colour bar and the graph's keys share the maps' flow: beside the last map when a row has room (the
  // quadrant a 2 × 2 arrangement of three maps would leave empty), under the maps otherwise
  const legend = el(doc, "div", "cw-map-legend");
  legend.append(barBox);
  const cellLine = noExport(el(doc, "div", "cw-cell-value"));
  column.append(zoomBar, windowText, maps, cellLine);

  const canvases: HTMLCanvasElement[] = [];
  let images: (HTMLCanvasElement | null)[] = [];
  let imageKey = "";
  let limit = 1;
  let n = 0;
  let view: Viewport = fullView(0);
  let last: { d: CompData; sel: MapSelection; subtract: boolean; words: CompWords } | null = null;
  /** The kinds that have a map: those with any value (a path-patching map of k alone draws one). */
  let shown: Kind[] = [...KINDS];
  let followed = "";

  function load(d: CompData, words: CompWords): void {
    canvases.length = 0;
    images = [];
    imageKey = "";
    n = (d.nLayers - 1) * d.nHeads;
    view = fullView(n);
    if (n === 0) {
      maps.replaceChildren(el(doc, "div", "cw-note", "A one-layer model has no composition: every head reads the embeddings directly."), legend);
      zoomBar.hidden = true;
      return;
    }
    zoomBar.hidden = false;
    const filled = KINDS.filter((_, k) => hasValues(d, k));
    shown = filled.length > 0 ? filled : [...KINDS];
    maps.replaceChildren(
      ...shown.map((kind) => {
        const box = el(doc, "div", "cw-map");
        box.append(el(doc, "div", "cw-map-title", words.mapTitle(kind)));
        const canvas = el(doc, "canvas");
        canvas.dataset.kind = kind;
        canvas.title = `${words.mapTitle(kind)}: rows earlier heads, columns later heads; click a cell to select the pair`;
        canvas.addEventListener("wheel", onWheel);
        canvases.push(canvas);
        box.append(canvas);
        return box;
      }),
      legend,
    );
  }

  /** The heatmaps' pixels, one per cell, rebuilt only when the data or the baseline choice changes. */
  function cellImages(d: CompData, subtract: boolean, lut: Lut): (HTMLCanvasElement | null)[] {
    const key = `${subtract}`; // (load() clears it for new data)
    if (key === imageKey && images.length === shown.length) return images;
    limit = colourLimit(d, subtract);
    images = shown.map((kind, i) => cellImage(doc, heatmapCells(d, KINDS.indexOf(kind), subtract, limit), lut, EMPTY, images[i] ?? undefined));
    imageKey = key;
    return images;
  }

  /** Keep what was just selected elsewhere in view: the selected edge's cell, else the selected head's column. */
  function follow(d: CompData, sel: MapSelection): void {
    const key = `${sel.edge?.join(".") ?? ""}|${sel.layer}.${sel.head}`;
    if (key === followed) return;
    followed = key;
    const inView = (i: number, start: number) => i >= start && i < start + view.size;
    if (sel.edge) {
      const row = sel.edge[0] * d.nHeads + sel.edge[1];
      const col = (sel.edge[2] - 1) * d.nHeads + sel.edge[3];
      if (!inView(row, view.r0) || !inView(col, view.c0)) view = centreOn(n, row, col, view.size);
    } else if (sel.layer >= 1) {
      const col = (sel.layer - 1) * d.nHeads + sel.head;
      if (!inView(col, view.c0)) view = clampView({ ...view, c0: col - view.size / 2 }, n);
    }
  }

  function draw(d: CompData, sel: MapSelection, subtract: boolean, words: CompWords): void {
    if (n === 0) return;
    const lut: Lut = subtract ? DIVERGING : VIRIDIS;
    const imgs = cellImages(d, subtract, lut);
    last = { d, sel, subtract, words };
    follow(d, sel);
    const size = mapSize(n);
    barBox.replaceChildren(
      colourBar(doc, lut, subtract ? -limit : 0, limit, words.barLabel, Math.max(200, Math.min(320, size + 40))),
    );
    canvases.forEach((canvas, i) => drawMap(canvas, imgs[i] ?? null, KINDS.indexOf(shown[i] as Kind), d, sel, subtract, lut, size, words));
    const full = isFull(view, n);
    zoomOut.disabled = full;
    whole.disabled = full;
    zoomIn.disabled = view.size <= Math.min(n, 8);
    windowText.textContent = full
      ? ""
      : `Zoomed: rows ${rangeName(d, view.r0, view.size, 0)}, columns ${rangeName(d, view.c0, view.size, 1)}`;
  }

  function drawMap(canvas: HTMLCanvasElement, image: HTMLCanvasElement | null, k: number, d: CompData, sel: MapSelection, subtract: boolean, lut: Lut, size: number, words: CompWords): void {
    const ctx = sizeCanvas(canvas, AXIS.left + size, AXIS.top + size);
    const measure = (text: string) => (ctx ? ctx.measureText(text).width : text.length * 6);
    if (ctx) {
      ctx.font = FONT;
      ctx.clearRect(0, 0, AXIS.left + size, AXIS.top + size);
    }
    const rows = headAxis(view.r0, view.size, size, d.nHeads, 0, () => 11, () => 11);
    const cols = headAxis(view.c0, view.size, size, d.nHeads, 1, measure, measure);
    const labels = [...axisLabels(rows, "rows"), ...axisLabels(cols, "cols")];
    canvas.dataset.cwViewport = `${view.r0},${view.c0},${view.size}`;
    canvas.dataset.cwAxisLabels = JSON.stringify(labels);
    canvas.dataset.cwValues = rows.cell >= VALUE_CELL ? "shown" : "hidden"; // (for tests: cells carry their values)
    canvas.setAttribute("aria-label", `${words.mapTitle(KINDS[k] as Kind)}, rows ${rangeName(d, view.r0, view.size, 0)}, columns ${rangeName(d, view.c0, view.size, 1)}`);
    if (ctx === null) return;
    if (image) {
      ctx.save();
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(image, view.c0, view.r0, view.size, view.size, AXIS.left, AXIS.top, size, size);
      ctx.restore();
    }
    drawBands(ctx, rows, cols, size);
    if (rows.cell >= VALUE_CELL) drawValues(ctx, d, k, subtract, lut, rows.cell);
    drawLabels(ctx, labels);
    const cell = size / view.size;
    const outline = (r0: number, c0: number, r1: number, c1: number, colour: string) => {
      const y0 = Math.max(r0, view.r0);
      const y1 = Math.min(r1, view.r0 + view.size - 1);
      const x0 = Math.max(c0, view.c0);
      const x1 = Math.min(c1, view.c0 + view.size - 1);
      if (y0 > y1 || x0 > x1) return;
      ctx.save();
      ctx.strokeStyle = colour;
      ctx.lineWidth = 1.5;
      ctx.strokeRect(AXIS.left + (x0 - view.c0) * cell + 0.75, AXIS.top + (y0 - view.r0) * cell + 0.75, (x1 - x0 + 1) * cell - 1.5, (y1 - y0 + 1) * cell - 1.5);
      ctx.restore();
    };
    if (sel.layer >= 1) {
      const col = (sel.layer - 1) * d.nHeads + sel.head;
      outline(0, col, n - 1, col, "rgba(0,0,0,0.35)");
    }
    if (sel.edge && (sel.edgeKind === "" || sel.edgeKind === KINDS[k])) {
      const [l1, h1, l2, h2] = sel.edge;
      const row = l1 * d.nHeads + h1;
      const col = (l2 - 1) * d.nHeads + h2;
      outline(row, col, row, col, "#000");
    }
  }

  /** Layer bands along both axes (alternating greys) and white lines between layers inside the map. */
  function drawBands(ctx: CanvasRenderingContext2D, rows: HeadAxis, cols: HeadAxis, size: number): void {
    ctx.save();
    rows.bands.forEach((b) => {
      ctx.fillStyle = b.layer % 2 ? "#e4e4e4" : "#f3f3f3";
      ctx.fillRect(0, AXIS.top + b.from, AXIS.layerStrip, b.to - b.from);
    });
    cols.bands.forEach((b) => {
      ctx.fillStyle = b.layer % 2 ? "#e4e4e4" : "#f3f3f3";
      ctx.fillRect(AXIS.left + b.from, 0, b.to - b.from, AXIS.layerRow);
    });
    // lines between layers, where a layer is wide enough for a line not to drown its cells
    ctx.strokeStyle = "rgba(255,255,255,0.9)";
    ctx.lineWidth = 1;
    for (const b of rows.bands) if (b.from > 0 && b.to - b.from >= 3) line(ctx, AXIS.left, AXIS.top + b.from, AXIS.left + size, AXIS.top + b.from);
    for (const b of cols.bands) if (b.from > 0 && b.to - b.from >= 3) line(ctx, AXIS.left + b.from, AXIS.top, AXIS.left + b.from, AXIS.top + size);
    ctx.restore();
  }

  /** Each shown cell's value, written in a colour readable on it. */
  function drawValues(ctx: CanvasRenderingContext2D, d: CompData, k: number, subtract: boolean, lut: Lut, cell: number): void {
    const src = heatmapCells(d, k, subtract, limit);
    ctx.save();
    ctx.font = "9px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let r = view.r0; r < view.r0 + view.size; r++)
      for (let c = view.c0; c < view.c0 + view.size; c++) {
        const i = src.index(r, c);
        if (i < 0) continue;
        const v = compValue(d, k, Math.floor(r / d.nHeads), r % d.nHeads, Math.floor(c / d.nHeads) + 1, c % d.nHeads, subtract);
        ctx.fillStyle = textOn(lutCss(lut, i));
        ctx.fillText(fmt(v, 2), AXIS.left + (c - view.c0 + 0.5) * cell, AXIS.top + (r - view.r0 + 0.5) * cell, cell - 2);
      }
    ctx.restore();
  }

  /** The cell under a pointer event on a map canvas, or null. */
  function cellAtPointer(event: MouseEvent, canvas: HTMLCanvasElement): { row: number; col: number } | null {
    const rect = canvas.getBoundingClientRect();
    const size = mapSize(n);
    const scale = rect.width / (AXIS.left + size) || 1;
    const x = (event.clientX - rect.left) / scale - AXIS.left;
    const y = (event.clientY - rect.top) / scale - AXIS.top;
    return cellOf(view, y / size, x / size);
  }

  function redraw(): void {
    if (last) draw(last.d, last.sel, last.subtract, last.words);
  }

  function setView(next: Viewport): void {
    view = clampView(next, n);
    redraw();
  }

  /** Ctrl/⌘ + wheel over a map zooms the maps at the pointer. On each canvas, not the maps' box: the maps' box has
   * no layout box in the flow of a narrow view (display: contents), and Chromium then scrolls the page without
   * letting a listener there cancel the wheel. */
  function onWheel(event: WheelEvent): void {
    const canvas = canvasOf(event);
    // without a modifier the page scrolls as usual; with Ctrl/⌘ the maps zoom at the pointer
    if (!canvas || !(event.ctrlKey || event.metaKey)) return;
    event.preventDefault();
    const rect = canvas.getBoundingClientRect();
    const size = mapSize(n);
    const scale = rect.width / (AXIS.left + size) || 1;
    const fx = Math.max(0, Math.min(1, ((event.clientX - rect.left) / scale - AXIS.left) / size));
    const fy = Math.max(0, Math.min(1, ((event.clientY - rect.top) / scale - AXIS.top) / size));
    setView(zoomAt(view, n, event.deltaY > 0 ? 1.25 : 0.8, fy, fx));
  }

  let drag: { x: number; y: number; view: Viewport; moved: boolean } | null = null;
  let suppressClick = false;
  const canvasOf = (event: Event) => (event.target instanceof HTMLCanvasElement ? event.target : null);
  const cleanups = [
    listen(zoomIn, "click", () => setView(zoomAt(view, n, 0.5, 0.5, 0.5))),
    listen(zoomOut, "click", () => setView(zoomAt(view, n, 2, 0.5, 0.5))),
    listen(whole, "click", () => setView(fullView(n))),
    listen(maps, "pointerdown", (event) => {
      const canvas = canvasOf(event);
      if (!canvas || event.button !== 0 || isFull(view, n)) return;
      drag = { x: event.clientX, y: event.clientY, view, moved: false };
      canvas.setPointerCapture?.(event.pointerId);
    }),
    listen(maps, "pointermove", (event) => {
      const canvas = canvasOf(event);
      if (drag && canvas) {
        const dx = event.clientX - drag.x;
        const dy = event.clientY - drag.y;
        if (!drag.moved && Math.hypot(dx, dy) < 4) return;
        drag.moved = true;
        const perCell = (canvas.getBoundingClientRect().width / (AXIS.left + mapSize(n))) * (mapSize(n) / view.size);
        setView(panBy(drag.view, n, -dy / perCell, -dx / perCell));
      }
    }),
    listen(maps, "pointerup", () => {
      suppressClick = drag?.moved ?? false;
      drag = null;
    }),
    listen(maps, "click", (event) => {
      const canvas = canvasOf(event);
      const d = last?.d;
      if (suppressClick) {
        suppressClick = false;
        return;
      }
      if (!canvas || !d) return;
      const cell = cellAtPointer(event, canvas);
      if (cell === null) return;
      const l1 = Math.floor(cell.row / d.nHeads);
      const l2 = Math.floor(cell.col / d.nHeads) + 1;
      if (l1 >= l2) return;
      on.selectEdge(l1, cell.row % d.nHeads, l2, cell.col % d.nHeads, canvas.dataset.kind ?? "");
    }),
    listen(maps, "mousemove", (event) => {
      const canvas = canvasOf(event);
      const d = last?.d;
      if (!canvas || !d || !last) return;
      const cell = cellAtPointer(event, canvas);
      if (cell === null) {
        cellLine.textContent = "";
        return;
      }
      const l1 = Math.floor(cell.row / d.nHeads);
      const l2 = Math.floor(cell.col / d.nHeads) + 1;
      const kind = (canvas.dataset.kind ?? "Q") as Kind;
      const v = compValue(d, KINDS.indexOf(kind), l1, cell.row % d.nHeads, l2, cell.col % d.nHeads, last.subtract);
      const text = l1 < l2 ? last.words.pair(kind, headName(l1, cell.row % d.nHeads), headName(l2, cell.col % d.nHeads), v) : `${headName(l1, cell.row % d.nHeads)} is not earlier than ${headName(l2, cell.col % d.nHeads)}`;
      canvas.title = text;
      cellLine.textContent = text;
    }),
    listen(maps, "mouseleave", () => {
      cellLine.textContent = "";
    }),
  ];
  const cleanup = () => {
    cleanups.forEach((c) => c());
    for (const canvas of canvases) canvas.removeEventListener("wheel", onWheel);
  };
  return { element: column, legend, load, draw, cleanup };
}

function line(ctx: CanvasRenderingContext2D, x0: number, y0: number, x1: number, y1: number): void {
  ctx.beginPath();
  ctx.moveTo(x0, y0);
  ctx.lineTo(x1, y1);
  ctx.stroke();
}

/** `L0H0–L30H31`: the heads of cells `start..start+count-1` of an axis starting at layer `firstLayer`. */
function rangeName(d: CompData, start: number, count: number, firstLayer: number): string {
  const name = (i: number) => headName(firstLayer + Math.floor(i / d.nHeads), i % d.nHeads);
  return `${name(start)}–${name(start + count - 1)}`;
}

/** The boxes of an axis's labels on the canvas (CSS px): layer names in the outer strip, head numbers in the inner one. */
function axisLabels(axis: HeadAxis, which: "rows" | "cols"): LabelBox[] {
  const box = (m: AxisMark, strip: "layer" | "head"): LabelBox =>
    which === "cols"
      ? { text: m.text, x: AXIS.left + m.from, y: strip === "layer" ? 0 : AXIS.layerRow + 1, w: m.to - m.from, h: strip === "layer" ? AXIS.layerRow : AXIS.headRow }
      : { text: m.text, x: strip === "layer" ? 0 : AXIS.layerStrip + 1, y: AXIS.top + m.from, w: strip === "layer" ? AXIS.layerStrip : AXIS.headStrip, h: m.to - m.from };
  return [...axis.layerMarks.map((m) => box(m, "layer")), ...axis.headMarks.map((m) => box(m, "head"))];
}

/** Labels centred in their boxes. */
function drawLabels(ctx: CanvasRenderingContext2D, labels: readonly LabelBox[]): void {
  ctx.save();
  ctx.font = FONT;
  ctx.fillStyle = "#333";
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  for (const b of labels) ctx.fillText(b.text, b.x + b.w / 2, b.y + b.h / 2 + 0.5);
  ctx.restore();
}
