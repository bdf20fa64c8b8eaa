// The graph drawn by level of detail (lib/graphlod.ts): a large graph (many
// positions, or many kept edges) through a horizontal viewport that zooms
// (the buttons, ctrl + wheel) and pans (drag, horizontal wheel); edges on a
// canvas, strongest first and on top, a time budget per frame, finished while
// the page is idle; nodes as SVG elements, only those in view, and zoomed out
// as bins of positions (a click on one zooms into it). The text under the plot
// says what the level of detail leaves out.

import { el, listen } from "../../lib/dom";
import { activeNodes, binNodes, binSize, centreX, clampX, drawChunk, EDGE_CAP, edgesInView, fitView, isFit, lodText, panX, toScreen, zoomX, type Bin, type XView } from "../../lib/graphlod";
import { edgeColour, edgeWidth, type GraphLayout, type GraphNodes, type Placed } from "../../lib/graphview";
import { perFrame } from "../../lib/selection";
import { fmt, svgEl, svgTitle } from "../../lib/svg";
import { PIN } from "./side";

/** What the level-of-detail renderer draws (the view recomputes it when a trait changes, not on a pan). */
export interface LodScene {
  layout: GraphLayout;
  nodes: GraphNodes;
  perPosition: boolean;
  src: ArrayLike<number>;
  dst: ArrayLike<number>;
  weight: ArrayLike<number>;
  /** Which of the first `kept.length` edges (the slider's) are drawn. */
  kept: readonly boolean[];
  total: number;
  /** The widest kept edge's |weight| (the legend's): edge widths are against it. */
  max: number;
  influence: ArrayLike<number>;
  pinned: ReadonlySet<number>;
  selected: number;
  dest: number;
  rowName: (layer: number) => string;
  nodeEl: (i: number, p: Placed, active: boolean, isPinned: boolean) => SVGGElement;
}

/** Ms of edge drawing per frame; the rest of the frame is the browser's. */
const FRAME_BUDGET_MS = 8;
/** Edges drawn at once, on top of the others (the strongest in view). */
const FRONT_EDGES = 150;
/** The view rests this long after a pan or zoom before the weaker edges are drawn, ms. */
const IDLE_MS = 150;
/** Zoom factor of one button press or wheel notch. */
const STEP = 1.6;
/** Column labels are at least this far apart, px. */
const LABEL_PX = 44;
/** Nodes this far outside the plot are still drawn (their edges and circles reach in), px. */
const MARGIN_PX = 24;
/** Room on the left for the rows' names, px. */
const GUTTER = 48;

export interface LodRenderer {
  /** Draw `scene` `plotPx` wide (keeping the current zoom when the layout keeps its width). */
  show(scene: LodScene, plotPx: number): void;
  /** Leave level of detail: remove the toolbar, canvas and text. */
  hide(): void;
  cleanup(): void;
}

export function lodRenderer(doc: Document, plot: HTMLElement, note: HTMLElement, toolbar: HTMLElement): LodRenderer {
  const wrap = el(doc, "div", "cw-graph-lod");
  // the strongest edges in view on the front canvas at once; the rest behind them, a budget per frame
  const back = el(doc, "canvas", "cw-graph-canvas");
  const front = el(doc, "canvas", "cw-graph-canvas");
  const overlay = svgEl(doc, "svg", { class: "cw-graph-svg cw-graph-overlay", role: "img" });
  wrap.append(back, front, overlay);
  const buttons = {
    out: button(doc, "−", "zoom out", "data-cw-zoom-out"),
    in: button(doc, "+", "zoom in", "data-cw-zoom-in"),
    fit: button(doc, "Fit", "show the whole graph", "data-cw-zoom-fit"),
  };
  toolbar.replaceChildren(el(doc, "span", "cw-graph-zoom-label", "Zoom: "), buttons.out, buttons.in, buttons.fit);
  let scene: LodScene | null = null;
  let active: Uint8Array = new Uint8Array(0); // (the nodes kept edges touch: once per scene, not per frame)
  let plotPx = 900;
  let inner = plotPx - GUTTER; // (the plot's width right of the rows' names: the view's width on screen)
  let view: XView = fitView(1);
  let width = 0;
  let base = 0; // (layout x of the first column's left edge: the view's 0)
  let drawing = 0; // (a newer draw cancels an older one's idle frames)
  let xs = new Float32Array(0);
  let ys = new Float32Array(0);
  let rs = new Float32Array(0);
  let dragged = false;
  let movedAt = -Infinity; // (while the view moves, only the strongest edges are drawn; the rest once it rests)
  const frame = perFrame(render);

  function setView(next: XView): void {
    movedAt = doc.defaultView?.performance.now() ?? 0;
    view = clampX(next, width, inner);
    frame.schedule();
  }

  function colPx(): number {
    const cols = scene?.layout.columns ?? [];
    const natural = cols.length > 1 ? (cols[1] as { x: number }).x - (cols[0] as { x: number }).x : 26;
    return (natural * inner) / view.span;
  }

  /** Screen place of each node: its own, or its bin's when zoomed out. */
  function place(bins: Bin[]): void {
    const s = scene as LodScene;
    const n = s.nodes.kind.length;
    xs = new Float32Array(n);
    ys = new Float32Array(n);
    rs = new Float32Array(n);
    s.layout.nodes.forEach((p, i) => {
      xs[i] = sx(p.x);
      ys[i] = p.y;
      rs[i] = p.r;
    });
    const rowY = new Map(s.layout.rows.map((r) => [r.layer, r.y]));
    for (const b of bins) {
      const [x, , r] = binPlace(b);
      for (const i of b.nodes) {
        xs[i] = x;
        ys[i] = rowY.get(b.layer) ?? (ys[i] as number);
        rs[i] = r;
      }
    }
  }

  function binPlace(b: Bin): [number, number, number] {
    const s = scene as LodScene;
    const cols = s.layout.columns;
    const a = cols[Math.min(b.from, cols.length - 1)]?.x ?? 0;
    const z = cols[Math.min(b.to, cols.length - 1)]?.x ?? a;
    const y = s.layout.rows.find((r) => r.layer === b.layer)?.y ?? 0;
    return [sx((a + z) / 2), y, 7];
  }

  function render(): void {
    if (scene === null) return;
    const s = scene;
    const h = s.layout.height;
    const k = s.perPosition ? binSize(colPx(), 24) : 0;
    const cols = s.layout.columns.length;
    const first = Math.max(0, Math.floor(posAt(GUTTER)));
    const last = Math.min(cols - 1, Math.ceil(posAt(plotPx + MARGIN_PX)));
    const bins = k > 0 ? binNodes(s.nodes.layer, s.nodes.pos, s.influence, k, first - (first % k), last, { pinned: s.pinned, selected: s.selected, active }) : [];
    place(bins);
    sizeCanvas(h);
    overlay.setAttribute("width", String(plotPx));
    overlay.setAttribute("height", String(h));
    overlay.setAttribute("viewBox", `0 0 ${plotPx} ${h}`);
    overlay.replaceChildren(...axes(s), ...(k > 0 ? bins.map((b) => binEl(b)) : nodesInView(s, active)));
    buttons.fit.disabled = isFit(view, width);
    buttons.out.disabled = buttons.fit.disabled;
    buttons.in.disabled = view.span <= plotPx + 0.5;
    edges(s, bins, k);
  }

  /** Position (fractional column) at screen x. */
  function posAt(at: number): number {
    const cols = scene?.layout.columns ?? [];
    if (cols.length < 2) return 0;
    const x0 = (cols[0] as { x: number }).x;
    const step = (cols[1] as { x: number }).x - x0;
    return (base + view.x0 + ((at - GUTTER) * view.span) / inner - x0) / step;
  }

  /** Screen x of layout x. */
  function sx(x: number): number {
    return GUTTER + toScreen(x - base, view, inner);
  }

  function sizeCanvas(h: number): void {
    const ratio = doc.defaultView?.devicePixelRatio ?? 1;
    for (const canvas of [back, front]) {
      const [w, hh] = [Math.round(plotPx * ratio), Math.round(h * ratio)];
      if (canvas.width !== w || canvas.height !== hh) [canvas.width, canvas.height] = [w, hh]; // (a resize reallocates)
      canvas.style.width = `${plotPx}px`;
      canvas.style.height = `${h}px`;
    }
  }

  function context(canvas: HTMLCanvasElement, h: number): CanvasRenderingContext2D | null {
    const ctx = canvas.getContext("2d");
    if (ctx === null) return null;
    const ratio = doc.defaultView?.devicePixelRatio ?? 1;
    ctx.restore(); // (the previous draw's clip; a no-op the first time)
    ctx.save();
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, plotPx, h);
    ctx.beginPath();
    ctx.rect(GUTTER, 0, plotPx - GUTTER, h); // (the rows' names stay clear)
    ctx.clip();
    ctx.globalAlpha = 0.75;
    return ctx;
  }

  function edges(s: LodScene, bins: Bin[], k: number): void {
    const found = edgesInView(s.kept, s.src, s.dst, xs, GUTTER - MARGIN_PX, plotPx + MARGIN_PX);
    const end = Math.min(found.edges.length, EDGE_CAP);
    const max = s.max;
    const ctxFront = context(front, s.layout.height);
    const ctxBack = context(back, s.layout.height);
    const token = ++drawing;
    const say = (drawn: number) => {
      note.textContent = lodText({ drawn, inView: found.edges.length, kept: found.kept, total: s.total, nodes: bins.reduce((a, b) => a + b.nodes.length, 0), bins: bins.length, binPositions: k, drawing: drawn < end });
      note.dataset.cwDrawn = String(drawn);
      note.dataset.cwInView = String(found.edges.length);
      note.dataset.cwBins = String(bins.length);
    };
    if (ctxFront === null || ctxBack === null) return say(0);
    const drawOne = (j: number, ctx: CanvasRenderingContext2D) => {
      const e = found.edges[j] as number;
      const a = s.src[e] as number;
      const b = s.dst[e] as number;
      const w = s.weight[e] as number;
      const x1 = xs[a] as number;
      const y1 = (ys[a] as number) - (rs[a] as number);
      const x2 = xs[b] as number;
      const y2 = (ys[b] as number) + (rs[b] as number);
      const bend = Math.max(18, Math.abs(y1 - y2) * 0.45);
      // An edge only passing through the view (both ends outside it) is a hairline: zoomed into a long prompt,
      // thousands of them cross the window, and drawn at their weight's width they hid the edges with an end in view.
      const through = (x1 < GUTTER || x1 > plotPx) && (x2 < GUTTER || x2 > plotPx);
      ctx.globalAlpha = through ? 0.08 : 0.75;
      ctx.strokeStyle = edgeColour(w);
      ctx.lineWidth = through ? 1 : edgeWidth(w, max);
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      ctx.bezierCurveTo(x1, y1 - bend, x2, y2 + bend, x2, y2);
      ctx.stroke();
    };
    const now = () => doc.defaultView?.performance.now() ?? Date.now();
    const step = (start: number) => {
      if (token !== drawing) return;
      if (now() - movedAt < IDLE_MS) {
        doc.defaultView?.requestAnimationFrame(() => step(start));
        return;
      }
      const next = drawChunk(start, end, FRAME_BUDGET_MS, now, (j) => drawOne(j, ctxBack));
      say(next);
      if (next < end) doc.defaultView?.requestAnimationFrame(() => step(next));
    };
    const top = Math.min(end, FRONT_EDGES);
    for (let j = top - 1; j >= 0; j--) drawOne(j, ctxFront); // (weakest first: the strongest on top)
    say(top);
    step(top);
  }

  function axes(s: LodScene): SVGElement[] {
    const out: SVGElement[] = [];
    for (const r of s.layout.rows) {
      out.push(svgEl(doc, "rect", { x: 0, y: r.y - 9, width: 44, height: 14, fill: "#fff", "fill-opacity": 0.8 }));
      out.push(svgEl(doc, "text", { x: 6, y: r.y + 4, "font-size": 11, fill: "#555" }, s.rowName(r.layer)));
    }
    const every = Math.max(1, Math.ceil(LABEL_PX / Math.max(1e-6, colPx())));
    s.layout.columns.forEach((c, k) => {
      const x = sx(c.x);
      const chosen = s.perPosition && k === s.dest;
      if (x < GUTTER - MARGIN_PX || x > plotPx + MARGIN_PX || (k % every !== 0 && !chosen)) return;
      const label = every > 1 ? `${k}` : c.label;
      out.push(svgEl(doc, "text", { x, y: s.layout.height - 6, "text-anchor": "middle", "font-size": 10, fill: chosen ? "#111" : "#777", "font-weight": chosen ? "bold" : null, "data-cw-column": k }, label));
    });
    return out;
  }

  function nodesInView(s: LodScene, active: Uint8Array): SVGElement[] {
    const out: SVGElement[] = [];
    for (let i = 0; i < s.nodes.kind.length; i++) {
      const x = xs[i] as number;
      if (x < GUTTER || x > plotPx + MARGIN_PX) continue;
      out.push(s.nodeEl(i, { x, y: ys[i] as number, r: rs[i] as number }, Boolean(active[i]) || s.pinned.has(i), s.pinned.has(i)));
    }
    return out;
  }

  function binEl(b: Bin): SVGGElement {
    const [x, y] = binPlace(b);
    const s = scene as LodScene;
    const span = Math.max(6, (Math.min(b.to, s.layout.columns.length - 1) - b.from + 1) * colPx() - 2);
    const g = svgEl(doc, "g", { class: "cw-node-bin", "data-cw-bin": `${b.layer}:${b.from}` });
    if (b.selected) g.dataset.cwSelected = "";
    if (b.pinned) g.dataset.cwPinned = "";
    const stroke = b.selected ? "#111" : b.pinned ? PIN : b.active ? "#666" : "#ccc";
    g.append(svgEl(doc, "rect", { x: x - span / 2, y: y - 7, width: span, height: 14, rx: 4, fill: b.active ? "#f4f4f4" : "#fbfbfb", stroke, "stroke-width": b.selected || b.pinned ? 2.5 : 1 }));
    if (span >= 16) g.append(svgEl(doc, "text", { x, y: y + 3.5, "text-anchor": "middle", "font-size": 9, fill: "#333", "pointer-events": "none" }, String(b.nodes.length)));
    const where = b.from === b.to ? `position ${b.from}` : `positions ${b.from}–${b.to}`;
    const marks = [b.pinned ? `${b.pinned} pinned` : "", b.selected ? "the selected node" : ""].filter(Boolean).join(", ");
    svgTitle(doc, g, `${s.rowName(b.layer)}, ${where}: ${b.nodes.length} nodes (${b.active} on kept edges${marks ? `, ${marks}` : ""}), influence ${fmt(b.influence, 3)}; click to zoom in`);
    return g;
  }

  /** Zoom into bin `key` (`layer:from`): its positions fill a tenth of the plot, or the closest zoom. */
  function zoomToBin(key: string): void {
    const s = scene;
    if (s === null) return;
    const from = Number(key.split(":")[1]);
    const cols = s.layout.columns;
    const at = cols[Math.min(cols.length - 1, from)]?.x ?? 0;
    setView(centreX(at - base, view.span / 8, width, inner));
  }

  let downAt: number | null = null;
  const cleanups = [
    listen(buttons.in, "click", () => setView(zoomX(view, width, inner, 1 / STEP, 0.5))),
    listen(buttons.out, "click", () => setView(zoomX(view, width, inner, STEP, 0.5))),
    listen(buttons.fit, "click", () => setView(fitView(width))),
    listen(wrap, "wheel", (event) => {
      const box = wrap.getBoundingClientRect();
      if (event.ctrlKey || event.metaKey) {
        event.preventDefault();
        const fx = Math.max(0, Math.min(1, (event.clientX - box.left - GUTTER) / Math.max(1, inner)));
        setView(zoomX(view, width, inner, event.deltaY > 0 ? STEP : 1 / STEP, fx));
      } else if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
        event.preventDefault();
        setView(panX(view, width, inner, event.shiftKey ? event.deltaY : event.deltaX, inner));
      }
    }),
    listen(wrap, "pointerdown", (event) => {
      downAt = event.clientX;
      dragged = false;
    }),
    listen(wrap, "pointermove", (event) => {
      if (downAt === null || !(event.buttons & 1)) return;
      const dx = downAt - event.clientX;
      if (!dragged && Math.abs(dx) < 4) return;
      dragged = true;
      downAt = event.clientX;
      setView(panX(view, width, inner, dx, inner));
    }),
    listen(wrap, "pointerup", () => {
      downAt = null;
    }),
    listen(wrap, "click", (event) => {
      if (dragged) {
        // (the end of a drag is no click on what the pointer stopped over)
        event.stopPropagation();
        dragged = false;
        return;
      }
      const bin = (event.target as Element | null)?.closest?.("[data-cw-bin]")?.getAttribute("data-cw-bin");
      if (bin) zoomToBin(bin);
    }),
  ];

  return {
    show(next: LodScene, px: number): void {
      const cols = next.layout.columns;
      const colW = cols.length > 1 ? (cols[1] as { x: number }).x - (cols[0] as { x: number }).x : 0;
      const start = Math.max(0, (cols[0]?.x ?? 0) - colW / 2);
      const changed = next.layout.width - start !== width || px !== plotPx;
      scene = next;
      active = activeNodes(next.nodes.kind.length, next.src, next.dst, next.kept);
      if (changed) {
        const frac = width > 0 ? { at: (view.x0 + view.span / 2) / width, span: view.span / width } : null;
        base = start;
        width = next.layout.width - start;
        plotPx = px;
        inner = Math.max(1, px - GUTTER);
        view = frac === null ? fitView(width) : centreX(frac.at * width, frac.span * width, width, inner);
      }
      if (!wrap.isConnected || wrap.parentElement !== plot) plot.replaceChildren(wrap);
      toolbar.hidden = false;
      note.hidden = false;
      render();
    },
    hide(): void {
      scene = null;
      drawing++;
      toolbar.hidden = true;
      note.hidden = true;
      note.textContent = "";
    },
    cleanup(): void {
      drawing++;
      frame.cancel();
      for (const c of cleanups) c();
    },
  };
}

function button(doc: Document, text: string, title: string, mark: string): HTMLButtonElement {
  const b = el(doc, "button", "cw-button", text);
  b.type = "button";
  b.title = title;
  b.setAttribute(mark, "");
  return b;
}
