// Level of detail for large graphs (pure functions, testable without a DOM).
//
// A graph of many positions (a 1,024-token attribution graph lays out 26,000 px
// wide) or many kept edges is drawn through a horizontal viewport: the layout's
// x-range `[x0, x0 + span)` fills the plot's width. Zoomed out, the nodes of one
// layer in a run of positions are drawn as one group (a bin) with their count;
// zoomed in far enough, every node in view is drawn. Edges go on a canvas,
// strongest first, a budget per frame, finished while the page is idle, up to a
// cap; whatever level of detail leaves out is said in text (`lodText`).

/** The layout's x-range shown: `[x0, x0 + span)`, stretched over the plot's width. */
export interface XView {
  x0: number;
  span: number;
}

/** Columns narrower than this on screen are drawn as bins of positions, px. */
export const BIN_PX = 18;
/** Most edges drawn in one view (the strongest in view); the rest are counted in the text. */
export const EDGE_CAP = 20_000;
/** A graph drawn with SVG elements keeps at most this many edges (more go to the canvas, by level of detail). */
export const SVG_EDGES = 2_500;

/** The whole layout in view. */
export function fitView(width: number): XView {
  return { x0: 0, span: Math.max(1, width) };
}

/** `view` kept inside a `width`-wide layout, no narrower than `minSpan` (the plot's width: one layout px per px). */
export function clampX(view: XView, width: number, minSpan: number): XView {
  const w = Math.max(1, width);
  const span = Math.min(w, Math.max(Math.min(minSpan, w), view.span));
  return { x0: Math.max(0, Math.min(w - span, view.x0)), span };
}

/** Zoom by `factor` (< 1 zooms in) keeping the layout x under the pointer (`fx`, 0–1 of the plot's width) still. */
export function zoomX(view: XView, width: number, minSpan: number, factor: number, fx: number): XView {
  const at = view.x0 + view.span * fx;
  const span = view.span * factor;
  return clampX({ x0: at - span * fx, span }, width, minSpan);
}

/** Moved by `dxPx` screen px (positive: the content moves left, the view right). */
export function panX(view: XView, width: number, minSpan: number, dxPx: number, plotPx: number): XView {
  return clampX({ x0: view.x0 + (dxPx * view.span) / Math.max(1, plotPx), span: view.span }, width, minSpan);
}

/** The view centred on layout x `at`, `span` wide. */
export function centreX(at: number, span: number, width: number, minSpan: number): XView {
  return clampX({ x0: at - span / 2, span }, width, minSpan);
}

/** Screen x of layout x. */
export function toScreen(x: number, view: XView, plotPx: number): number {
  return ((x - view.x0) * plotPx) / view.span;
}

/** Whether the view shows the whole layout. */
export function isFit(view: XView, width: number): boolean {
  return view.x0 <= 0.5 && view.span >= width - 0.5;
}

/** Positions per bin: 1 with every node drawn (columns wide enough), else enough that a bin is `BIN_PX` wide. */
export function binSize(colPx: number, spreadPx: number): number {
  if (colPx >= spreadPx) return 0; // 0: no bins
  return Math.max(1, Math.ceil(BIN_PX / Math.max(1e-6, colPx)));
}

export interface Bin {
  layer: number;
  /** First and last position of the bin. */
  from: number;
  to: number;
  nodes: number[];
  influence: number;
  pinned: number;
  selected: boolean;
  active: number;
}

/**
 * Nodes per (layer, run of `k` positions) in `[posFrom, posTo]`: the bins a zoomed-out view draws. A node with
 * no position (pos < 0) gets a bin of its own layer at position 0.
 */
export function binNodes(
  layer: ArrayLike<number>,
  pos: ArrayLike<number>,
  influence: ArrayLike<number>,
  k: number,
  posFrom: number,
  posTo: number,
  marks: { pinned: ReadonlySet<number>; selected: number; active: Uint8Array },
): Bin[] {
  const bins = new Map<string, Bin>();
  const step = Math.max(1, Math.floor(k));
  for (let i = 0; i < layer.length; i++) {
    const p = Math.max(0, pos[i] as number);
    if (p < posFrom || p > posTo) continue;
    const b = Math.floor(p / step);
    const key = `${layer[i]}/${b}`;
    let bin = bins.get(key);
    if (bin === undefined) {
      bin = { layer: layer[i] as number, from: b * step, to: b * step + step - 1, nodes: [], influence: 0, pinned: 0, selected: false, active: 0 };
      bins.set(key, bin);
    }
    bin.nodes.push(i);
    const v = influence[i] as number;
    if (Number.isFinite(v)) bin.influence += v;
    if (marks.pinned.has(i)) bin.pinned++;
    if (marks.selected === i) bin.selected = true;
    if (marks.active[i]) bin.active++;
  }
  return [...bins.values()];
}

/** 1 for each node an edge among `kept` touches (the others are drawn faint). */
export function activeNodes(n: number, src: ArrayLike<number>, dst: ArrayLike<number>, kept: ArrayLike<boolean | number>): Uint8Array {
  const out = new Uint8Array(n);
  for (let e = 0; e < kept.length; e++) {
    if (!kept[e]) continue;
    out[src[e] as number] = 1;
    out[dst[e] as number] = 1;
  }
  return out;
}

/** Sum of |weight| into and out of each node over the `kept` edges (a node's hover text), in one pass. */
export function nodeWeights(n: number, src: ArrayLike<number>, dst: ArrayLike<number>, weight: ArrayLike<number>, count: number): { into: Float64Array; out: Float64Array } {
  const into = new Float64Array(n);
  const out = new Float64Array(n);
  for (let e = 0; e < Math.min(count, src.length); e++) {
    const w = Math.abs(weight[e] as number);
    if (!Number.isFinite(w)) continue;
    const d = dst[e] as number;
    const a = src[e] as number;
    into[d] = (into[d] as number) + w;
    out[a] = (out[a] as number) + w;
  }
  return { into, out };
}

/**
 * The kept edges with a part in screen x `[lo, hi]`, strongest first (the input order), given each node's screen
 * x: an edge's curve stays between its ends' x (its control points share them), so one outside on the same side
 * is out of view. Returns the indexes and how many kept edges there were in all.
 */
export function edgesInView(kept: ArrayLike<boolean | number>, src: ArrayLike<number>, dst: ArrayLike<number>, xs: ArrayLike<number>, lo: number, hi: number): { edges: Int32Array; kept: number } {
  const found = new Int32Array(kept.length);
  let n = 0;
  let all = 0;
  for (let e = 0; e < kept.length; e++) {
    if (!kept[e]) continue;
    all++;
    const a = xs[src[e] as number] as number;
    const b = xs[dst[e] as number] as number;
    if ((a < lo && b < lo) || (a > hi && b > hi) || !Number.isFinite(a) || !Number.isFinite(b)) continue;
    found[n++] = e;
  }
  return { edges: found.subarray(0, n), kept: all };
}

/** What the view shows of the edges, in words, when level of detail leaves something out (else what it shows). */
export function lodText(o: { drawn: number; inView: number; kept: number; total: number; nodes: number; bins: number; binPositions: number; drawing: boolean }): string {
  const n = (v: number) => v.toLocaleString("en-US");
  const parts: string[] = [];
  const outside = o.kept - o.inView;
  if (o.drawing) parts.push(`drawing ${n(o.drawn)} of ${n(Math.min(o.inView, EDGE_CAP))} edges in view…`);
  else if (o.drawn < o.inView) parts.push(`showing the ${n(o.drawn)} strongest of ${n(o.inView)} edges in view`);
  else parts.push(`showing all ${n(o.drawn)} edges in view`);
  parts.push(`${n(o.kept)} kept of ${n(o.total)}${outside > 0 ? `, ${n(outside)} outside the view` : ""}`);
  if (o.bins > 0) parts.push(`${n(o.nodes)} nodes drawn as ${n(o.bins)} groups of up to ${n(o.binPositions)} positions (click a group to zoom in)`);
  const hidden = o.drawn < o.inView || o.bins > 0;
  const advice = hidden ? "; zoom in or keep fewer edges to see each one" : "";
  return `Level of detail: ${parts.join("; ")}${advice}.`;
}

/** Edges drawn this frame: from `start`, until `budgetMs` has passed (checked every 32 edges) or `end`. */
export function drawChunk(start: number, end: number, budgetMs: number, now: () => number, drawOne: (k: number) => void): number {
  const t0 = now();
  let k = start;
  while (k < end) {
    const stop = Math.min(end, k + 32);
    for (; k < stop; k++) drawOne(k);
    if (now() - t0 >= budgetMs) break;
  }
  return k;
}
