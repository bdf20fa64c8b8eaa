// AttentionPatterns view: a layers × heads grid of thumbnails, one large
// pattern on canvas (zoom with the wheel, drag to pan, double-click to reset),
// the selected head's direct logit effect as a signed strip beside it, and the
// tokens as text.
//
// Kernel → view: tokens, patterns / value_patterns (uint8 binary buffers, see
// lib/patterns.ts; while the kernel streams, `[L, H, 0]` placeholders whose
// heads arrive as custom messages), value_norms, logit_effect, diagonals.
// View ↔ kernel: selected_layer / selected_head (thumbnail), selected_dest
// (token, or a row), selected_src (a cell, or a token in "source" hover mode),
// pattern_kind, show_diagonals. Hover is front-end only: hovering a
// destination shades the tokens by its attention over sources, hovering a
// source shades them by the attention each destination pays it.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, decodeOptional, type WireArray } from "../lib/arrays";
import {
  COLOUR_SCALES,
  type ColourScale,
  fitSide,
  followSelection,
  rowMaxima,
  scaleCells,
  scaleWeights,
  WHEEL_HINT,
  wheelZooms,
} from "../lib/attentionui";
import { DIVERGING, divergingIndex, type Lut } from "../lib/colour";
import { el, listen } from "../lib/dom";
import { noExport } from "../lib/export";
import { blit, type CellSource, cellImage, type RGBA, sizeCanvas } from "../lib/heatmap";
import { makePanel, segmented, setTitle } from "../lib/panel";
import {
  absMax,
  columnWeights,
  fillHead,
  headReady,
  type Patterns,
  readyCount,
  regionCells,
  rowWeights,
  toPatterns,
  weightAt,
} from "../lib/patterns";
import { indexOr, NONE, onTraits, perFrame, setTraits, toggle } from "../lib/selection";
import { applyShades, ATTENTION, lutGradient, shadeIndices } from "../lib/shading";
import { fmt, headName } from "../lib/svg";
import { tokenLabel } from "../lib/tokens";
import { cellOf, clampView, diagonalInView, fullView, isFull, panBy, ticks, type Viewport, zoomAt } from "../lib/viewport";
import "../styles/attention.css";

export interface Diagonal {
  offset: number;
  label: string;
}

export interface AttentionTraits {
  [key: string]: unknown;
  tokens: string[];
  patterns: WireArray;
  causal: boolean;
  value_patterns: WireArray | null;
  value_norms: WireArray | null;
  logit_effect: WireArray | null;
  pattern_kind: string;
  show_diagonals: boolean;
  diagonals: Diagonal[];
  selected_layer: number;
  selected_head: number;
  selected_dest: number;
  selected_src: number;
}

type Model = AnyModel<AttentionTraits>;

const MAIN_MIN_PX = 220;
const MAIN_MAX_PX = 440;
const MAIN_CELL_PX = 26;
const LEFT = 86; // margin for destination labels
const TOP = 62; // margin for source labels
const STRIP_GAP = 8;
const STRIP_W = 12;
const LABEL_MIN_CELL = 9; // cells at least this tall get token labels
const EMPTY_RGBA: RGBA = [244, 244, 244, 255]; // above the causal diagonal
const SELECT = "#D55E00"; // Okabe–Ito vermillion
const HOVER = "#000000";
const DIAGONAL_COLOURS = ["#E69F00", "#CC79A7", "#56B4E9", "#F0E442"];
const THUMB_BUDGET_MS = 8;


type Kind = "raw" | "value";

interface Data {
  tokens: string[];
  raw: Patterns;
  value: Patterns | null;
  norms: Float32Array | null;
  effect: Float32Array | null;
}

interface Layout {
  size: number; // heatmap side, CSS px
  left: number;
  top: number;
  strip: boolean;
  width: number;
  height: number;
}

interface Hover {
  dest: number;
  src: number;
}

/** The main canvas's layout for `n` tokens, fitted to `available` px of width when given. */
export function mainLayout(n: number, strip: boolean, available = 0): Layout {
  const right = strip ? STRIP_GAP + STRIP_W + 4 : 4;
  const size = fitSide(Math.min(MAIN_MAX_PX, Math.max(MAIN_MIN_PX, n * MAIN_CELL_PX)), available, LEFT + right);
  const width = LEFT + size + right;
  return { size, left: LEFT, top: TOP, strip, width, height: TOP + size + 4 };
}

/** Where a point (CSS px, relative to the canvas) falls: heatmap cell, strip row, label row/column, or nothing. */
export function hitTest(
  layout: Layout,
  view: Viewport,
  x: number,
  y: number,
): { area: "cell" | "strip" | "row" | "col"; row: number; col: number } | null {
  const fx = (x - layout.left) / layout.size;
  const fy = (y - layout.top) / layout.size;
  const inRows = fy >= 0 && fy < 1;
  const inCols = fx >= 0 && fx < 1;
  if (inRows && inCols) {
    const c = cellOf(view, fy, fx);
    return c === null ? null : { area: "cell", ...c };
  }
  if (inRows) {
    const row = view.r0 + Math.floor(fy * view.size);
    const stripX = layout.left + layout.size + STRIP_GAP;
    if (layout.strip && x >= stripX && x < stripX + STRIP_W) return { area: "strip", row, col: NONE };
    if (x < layout.left && x >= 0) return { area: "row", row, col: NONE };
  }
  if (inCols && y < layout.top && y >= 0) return { area: "col", row: NONE, col: view.c0 + Math.floor(fx * view.size) };
  return null;
}

/** The strip's cells: per row block of the view, the value of largest magnitude (NaN when none). */
export function stripCells(values: Float32Array, offset: number, view: Viewport, maxRows: number, limit: number): CellSource {
  const rows = Math.max(1, Math.min(view.size, Math.floor(maxRows)));
  const picked = new Float32Array(rows).fill(Number.NaN);
  for (let r = 0; r < view.size; r++) {
    const b = Math.floor((r * rows) / view.size);
    const v = values[offset + view.r0 + r] as number;
    const cur = picked[b] as number;
    if (!Number.isNaN(v) && (Number.isNaN(cur) || Math.abs(v) > Math.abs(cur))) picked[b] = v;
  }
  return { rows, cols: 1, index: (r) => (Number.isNaN(picked[r] as number) ? -1 : divergingIndex(picked[r] as number, limit)) };
}

/** Read the per-position array `[L, H, n]` (or null when absent or mis-shaped). */
function perPosition(wire: WireArray | null | undefined, p: Patterns): Float32Array | null {
  const a = decodeOptional(wire);
  if (a === null || !(a.data instanceof Float32Array)) return null;
  return a.data.length === p.nLayers * p.nHeads * p.nTokens ? a.data : null;
}

export function renderAttention({ model, el: root }: RenderProps<AttentionTraits>): () => void {
  const doc = root.ownerDocument;
  const panel = makePanel(root, "attention", "cw-attention", () => {
    const s = sel();
    return s ? headName(s.layer, s.head) : "";
  });
  // the stylesheet's selection and hover colours are the canvas's (one definition, here)
  panel.root.style.setProperty("--cw-select", SELECT);
  panel.root.style.setProperty("--cw-hover", HOVER);
  const offline = model.get("__offline__" as never) === true;
  const cleanups: (() => void)[] = [];

  // ---- structure
  const kindControl = segmented(
    doc,
    "Pattern",
    [
      { value: "raw", label: "Raw", title: "Attention weights A[dest, src]" },
      { value: "value", label: "Value-weighted", title: "A[dest, src] · ‖v_src W_O‖, each row normalised to sum to 1" },
    ],
    (v) => setTraits(model, { pattern_kind: v }),
  );
  const tokenControl = segmented(
    doc,
    "Tokens show",
    [
      { value: "attention", label: "Attention", title: "Shade tokens by the hovered or selected token's attention" },
      { value: "logit", label: "Logit effect", title: "Shade each token by this head's direct effect on the logit of the next token" },
    ],
    (v) => {
      tokenMode = v === "logit" ? "logit" : "attention";
      frame.schedule();
    },
  );
  const hoverControl = segmented(
    doc,
    "Hover token as",
    [
      { value: "dest", label: "Destination", title: "Hovering a token shows where it attends (its row)" },
      { value: "src", label: "Source", title: "Hovering a token shows which tokens attend to it (its column)" },
    ],
    (v) => {
      hoverMode = v === "src" ? "src" : "dest";
      hover = { dest: NONE, src: NONE };
      frame.schedule();
    },
  );
  const scaleControl = segmented(doc, "Colour", COLOUR_SCALES, (v) => {
    colourScale = v === "row" || v === "gamma" ? v : "linear";
    version++;
    queueAllThumbs();
    frame.schedule();
  });
  const diagLabel = el(doc, "label");
  const diagBox = el(doc, "input");
  diagBox.type = "checkbox";
  diagBox.dataset.cwControl = "diagonals";
  diagLabel.append(diagBox, doc.createTextNode("Offset diagonals"));
  const resetButton = el(doc, "button", "cw-button cw-small", "Reset zoom");
  resetButton.type = "button";
  resetButton.title = "Show the whole pattern (or double-click it)";
  const zoomText = el(doc, "span", "cw-zoom");
  panel.controls.append(kindControl.element, scaleControl.element, tokenControl.element, hoverControl.element, diagLabel, resetButton, zoomText);

  const thumbs = el(doc, "div", "cw-thumbs");
  thumbs.setAttribute("role", "group");
  thumbs.setAttribute("aria-label", "Heads");
  const main = el(doc, "div", "cw-main");
  const caption = el(doc, "div", "cw-caption");
  const canvas = el(doc, "canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  const legend = el(doc, "div", "cw-legend");
  const hoverLine = noExport(el(doc, "div", "cw-hover"));
  main.append(caption, canvas, legend, hoverLine);
  panel.body.append(thumbs, main);
  const tokensHead = noExport(el(doc, "div", "cw-tokens-head"));
  const tokenBox = el(doc, "div", "cw-tokens");
  // the status line (selection in words) stays last
  root.insertBefore(tokensHead, panel.status);
  root.insertBefore(tokenBox, panel.status);

  // ---- state
  let data: Data | null = null;
  let tokenSpans: HTMLSpanElement[] = [];
  let thumbButtons: HTMLButtonElement[] = [];
  let thumbCanvases: HTMLCanvasElement[] = [];
  let thumbQueue: number[] = [];
  let thumbPx = 40;
  let view: Viewport = fullView(0);
  let hover: Hover = { dest: NONE, src: NONE };
  let hoverMode: "dest" | "src" = "dest";
  let tokenMode: "attention" | "logit" = "attention";
  let colourScale: ColourScale = "linear";
  let shadeNext = new Int16Array(0);
  let shadePrev = new Int16Array(0);
  let shadeKey = new Int16Array(0);
  let mainImage: HTMLCanvasElement | null = null;
  let mainKey = "";
  let version = 0;
  let painted = false;
  let requested = false;

  function sel(): { layer: number; head: number; dest: number; src: number } | null {
    if (data === null) return null;
    const p = data.raw;
    return {
      layer: indexOr(model.get("selected_layer"), p.nLayers, 0),
      head: indexOr(model.get("selected_head"), p.nHeads, 0),
      dest: indexOr(model.get("selected_dest"), p.nTokens, NONE, true),
      src: indexOr(model.get("selected_src"), p.nTokens, NONE, true),
    };
  }

  function kind(): Kind {
    return model.get("pattern_kind") === "value" && data?.value ? "value" : "raw";
  }

  function shown(): Patterns | null {
    if (data === null) return null;
    return kind() === "value" && data.value ? data.value : data.raw;
  }

  function describe(i: number): string {
    const token = data?.tokens[i];
    return token === undefined ? `${i}` : `${i} “${tokenLabel(token, 18).text}”`;
  }

  // ---- data
  function showError(message: string): void {
    data = null;
    thumbs.replaceChildren();
    tokenBox.replaceChildren();
    caption.textContent = "";
    legend.replaceChildren();
    panel.status.textContent = message;
    panel.status.classList.add("cw-error");
  }

  function loadTokens(): void {
    const tokens = model.get("tokens") ?? [];
    tokenSpans = tokens.map((token, i) => {
      const span = el(doc, "span", "cw-token");
      const label = tokenLabel(token);
      span.textContent = label.text;
      span.title = `${i}: ${label.title ?? label.text}`;
      span.dataset.cwToken = String(i);
      return span;
    });
    // words as words: a newline token ends its line (it still shows as ⏎)
    tokenBox.replaceChildren(...tokenSpans.flatMap((span, i) => ((tokens[i] ?? "").endsWith("\n") ? [span, el(doc, "br")] : [span])));
    shadeNext = new Int16Array(tokens.length);
    shadePrev = new Int16Array(tokens.length).fill(-1);
    shadeKey = new Int16Array(tokens.length);
  }

  function loadArrays(): void {
    const tokens = model.get("tokens") ?? [];
    const causal = Boolean(model.get("causal"));
    try {
      const raw = toPatterns(decodeArray(model.get("patterns")), tokens.length, causal);
      const valueWire = decodeOptional(model.get("value_patterns"));
      let value = valueWire === null ? null : toPatterns(valueWire, tokens.length, causal);
      if (value !== null && (value.nLayers !== raw.nLayers || value.nHeads !== raw.nHeads)) value = null;
      data = { tokens, raw, value, norms: perPosition(model.get("value_norms"), raw), effect: perPosition(model.get("logit_effect"), raw) };
    } catch (err) {
      showError(err instanceof Error ? err.message : String(err));
      return;
    }
    panel.status.classList.remove("cw-error");
    version++;
    if (view.size !== tokens.length) view = fullView(tokens.length);
    setTitle(panel, "Attention patterns", `${tokens.length} tokens · ${data.raw.nLayers} × ${data.raw.nHeads} heads`);
    buildThumbs(data.raw);
    if (data.raw.ready !== null && !requested && !offline) {
      requested = true;
      model.send({ type: "want_heads" });
    }
    if (data.raw.ready === null) requested = false;
  }

  function onCustom(content: unknown, buffers: unknown): void {
    const msg = content as { type?: unknown; heads?: unknown; value?: unknown } | null;
    if (data === null || msg?.type !== "heads" || !Array.isArray(msg.heads) || !Array.isArray(buffers)) return;
    const perHead = msg.value === true ? 2 : 1;
    msg.heads.forEach((lh: unknown, i: number) => {
      if (!Array.isArray(lh) || data === null) return;
      const [layer, head] = lh as [number, number];
      const bytes = (k: number): Uint8Array | null => {
        const b = (buffers as unknown[])[i * perHead + k] as DataView | ArrayBuffer | undefined;
        if (b === undefined) return null;
        return b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
      };
      try {
        const raw = bytes(0);
        if (raw !== null && data.raw.ready !== null && !headReady(data.raw, layer, head)) fillHead(data.raw, layer, head, raw);
        const value = perHead === 2 ? bytes(1) : null;
        if (value !== null && data.value?.ready != null && !headReady(data.value, layer, head)) fillHead(data.value, layer, head, value);
      } catch {
        return; // a message that does not fit this data (stale): the final traits will arrive anyway
      }
      queueThumb(layer * data.raw.nHeads + head, true);
    });
    version++;
    frame.schedule();
  }

  // ---- thumbnails
  function buildThumbs(p: Patterns): void {
    thumbPx = Math.max(22, Math.min(48, Math.floor(380 / Math.max(1, p.nHeads))));
    thumbs.style.gridTemplateColumns = `auto repeat(${p.nHeads}, auto)`;
    const cells: HTMLElement[] = [el(doc, "span")];
    for (let head = 0; head < p.nHeads; head++) cells.push(el(doc, "span", "cw-axis", `H${head}`));
    thumbButtons = [];
    thumbCanvases = [];
    for (let layer = 0; layer < p.nLayers; layer++) {
      cells.push(el(doc, "span", "cw-axis", `L${layer}`));
      for (let head = 0; head < p.nHeads; head++) {
        const button = el(doc, "button", "cw-thumb");
        button.type = "button";
        button.dataset.cwHead = `${layer}.${head}`;
        button.title = `Layer ${layer}, head ${head}`;
        button.setAttribute("aria-label", `Layer ${layer}, head ${head}`);
        button.classList.toggle("cw-pending", !headReady(p, layer, head));
        const c = el(doc, "canvas");
        sizeCanvas(c, thumbPx, thumbPx);
        button.append(c);
        thumbButtons.push(button);
        thumbCanvases.push(c);
        cells.push(button);
      }
    }
    thumbs.replaceChildren(...cells);
    queueAllThumbs();
  }

  function queueAllThumbs(): void {
    if (data === null) return;
    const s = sel();
    const first = s ? s.layer * data.raw.nHeads + s.head : 0;
    thumbQueue = [first];
    for (let i = 0; i < thumbButtons.length; i++) if (i !== first) thumbQueue.push(i);
    thumbFrame.schedule();
  }

  function queueThumb(i: number, front = false): void {
    if (!thumbQueue.includes(i)) {
      if (front) thumbQueue.unshift(i);
      else thumbQueue.push(i);
    }
    thumbFrame.schedule();
  }

  function drawThumb(i: number): void {
    const p = shown();
    const c = thumbCanvases[i];
    const button = thumbButtons[i];
    if (p === null || c === undefined || button === undefined) return;
    const layer = Math.floor(i / p.nHeads);
    const head = i % p.nHeads;
    const ready = headReady(p, layer, head);
    button.classList.toggle("cw-pending", !ready);
    const ctx = sizeCanvas(c, thumbPx, thumbPx);
    if (ctx === null) return;
    ctx.clearRect(0, 0, thumbPx, thumbPx);
    ctx.fillStyle = "#f4f4f4";
    ctx.fillRect(0, 0, thumbPx, thumbPx);
    if (!ready) return;
    const dpr = globalThis.devicePixelRatio || 1;
    const pooled = regionCells(p, layer, head, { r0: 0, c0: 0, rows: p.nTokens, cols: p.nTokens }, thumbPx * dpr);
    const maxima = colourScale === "row" ? rowMaxima(p, layer, head, 0, p.nTokens, pooled.rows) : null;
    const image = cellImage(doc, scaleCells(pooled, colourScale, maxima), ATTENTION, EMPTY_RGBA);
    if (image !== null) blit(ctx, image, 0, 0, thumbPx, thumbPx);
  }

  const thumbFrame = perFrame(() => {
    const start = performance.now();
    while (thumbQueue.length > 0 && performance.now() - start < THUMB_BUDGET_MS) drawThumb(thumbQueue.shift() as number);
    if (thumbQueue.length > 0) thumbFrame.schedule();
  });

  // ---- main canvas
  function layout(): Layout {
    return mainLayout(data?.raw.nTokens ?? 0, data?.effect != null, panel.body.clientWidth);
  }

  function drawMain(s: { layer: number; head: number; dest: number; src: number }, p: Patterns, d: Data): void {
    const L = layout();
    if (main.style.width !== `${L.width}px`) main.style.width = `${L.width}px`;
    const ctx = sizeCanvas(canvas, L.width, L.height);
    if (ctx === null) return;
    const n = p.nTokens;
    const cs = L.size / Math.max(1, view.size);
    ctx.clearRect(0, 0, L.width, L.height);
    ctx.fillStyle = "#f4f4f4";
    ctx.fillRect(L.left, L.top, L.size, L.size);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#666";
    ctx.textBaseline = "alphabetic";
    ctx.textAlign = "left";
    ctx.fillText("dest ↓  src →", 4, 12);

    if (!headReady(p, s.layer, s.head)) {
      ctx.fillStyle = "#555";
      ctx.textAlign = "center";
      ctx.fillText(`Loading layer ${s.layer}, head ${s.head}…`, L.left + L.size / 2, L.top + L.size / 2);
      return;
    }
    const dpr = globalThis.devicePixelRatio || 1;
    const key = `${kind()}|${s.layer}|${s.head}|${view.r0},${view.c0},${view.size}|${L.size * dpr}|${version}|${colourScale}`;
    if (key !== mainKey || mainImage === null) {
      const cells = regionCells(p, s.layer, s.head, { r0: view.r0, c0: view.c0, rows: view.size, cols: view.size }, L.size * dpr);
      const maxima = colourScale === "row" ? rowMaxima(p, s.layer, s.head, view.r0, view.size, cells.rows) : null;
      mainImage = cellImage(doc, scaleCells(cells, colourScale, maxima), ATTENTION, EMPTY_RGBA, mainImage ?? undefined);
      mainKey = key;
    }
    if (mainImage !== null) blit(ctx, mainImage, L.left, L.top, L.size, L.size);

    // labels: token text when cells are tall enough, else positions
    ctx.fillStyle = "#333";
    const emphasis = (i: number, axis: "row" | "col") =>
      axis === "row" ? i === s.dest || i === hover.dest : i === s.src || i === hover.src;
    if (cs >= LABEL_MIN_CELL) {
      ctx.font = `${Math.min(12, Math.max(8, Math.floor(cs * 0.85)))}px ui-monospace, SFMono-Regular, Menlo, monospace`;
      ctx.textBaseline = "middle";
      for (let r = 0; r < view.size; r++) {
        const i = view.r0 + r;
        ctx.fillStyle = emphasis(i, "row") ? SELECT : "#333";
        ctx.textAlign = "right";
        ctx.fillText(tokenLabel(d.tokens[i] ?? "", 11).text, L.left - 4, L.top + (r + 0.5) * cs, L.left - 8);
      }
      for (let c = 0; c < view.size; c++) {
        const i = view.c0 + c;
        ctx.save();
        ctx.translate(L.left + (c + 0.5) * cs, L.top - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.fillStyle = emphasis(i, "col") ? SELECT : "#333";
        ctx.textAlign = "left";
        ctx.fillText(tokenLabel(d.tokens[i] ?? "", 8).text, 0, 0, L.top - 18);
        ctx.restore();
      }
    } else {
      ctx.font = "10px system-ui, sans-serif";
      ctx.fillStyle = "#555";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      for (const t of ticks(view.r0, view.size, 8)) ctx.fillText(String(t), L.left - 9, L.top + (t - view.r0 + 0.5) * cs);
      ctx.textAlign = "center";
      ctx.textBaseline = "alphabetic";
      for (const t of ticks(view.c0, view.size, 6)) ctx.fillText(String(t), L.left + (t - view.c0 + 0.5) * cs, L.top - 9);
    }

    // logit-effect strip
    if (L.strip && d.effect !== null) {
      const off = (s.layer * p.nHeads + s.head) * n;
      const limit = absMax(d.effect, off, n);
      const x = L.left + L.size + STRIP_GAP;
      ctx.fillStyle = "#f4f4f4";
      ctx.fillRect(x, L.top, STRIP_W, L.size);
      const image = cellImage(doc, stripCells(d.effect, off, view, L.size * dpr, limit), DIVERGING, EMPTY_RGBA);
      if (image !== null) blit(ctx, image, x, L.top, STRIP_W, L.size);
      ctx.save();
      ctx.translate(x + STRIP_W / 2 + 3, L.top - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.font = "10px system-ui, sans-serif";
      ctx.fillStyle = "#555";
      ctx.textAlign = "left";
      ctx.fillText("logit", 0, 0);
      ctx.restore();
    }

    // offset diagonals
    if (model.get("show_diagonals")) {
      (model.get("diagonals") ?? []).forEach((diag, k) => {
        const seg = diagonalInView(view, Number(diag.offset));
        if (seg === null) return;
        ctx.save();
        ctx.strokeStyle = DIAGONAL_COLOURS[k % DIAGONAL_COLOURS.length] as string;
        ctx.lineWidth = 1.5;
        ctx.setLineDash([4, 3]);
        ctx.beginPath();
        ctx.moveTo(L.left + (seg.from[1] + 0.5) * cs, L.top + (seg.from[0] + 0.5) * cs);
        ctx.lineTo(L.left + (seg.to[1] + 0.5) * cs, L.top + (seg.to[0] + 0.5) * cs);
        ctx.stroke();
        ctx.restore();
      });
    }

    // hover and selection
    // a row or column: outlined when cells are big enough, else a thin line with a marker in the margin
    const mark = (i: number, axis: "row" | "col", colour: string, width: number) => {
      const start = axis === "row" ? view.r0 : view.c0;
      if (i < start || i >= start + view.size) return;
      const at = (i - start) * cs;
      ctx.save();
      ctx.strokeStyle = colour;
      ctx.fillStyle = colour;
      ctx.lineWidth = width;
      if (cs >= 3) {
        if (axis === "row") ctx.strokeRect(L.left + 0.5, L.top + at + 0.5, L.size - 1, cs - 1);
        else ctx.strokeRect(L.left + at + 0.5, L.top + 0.5, cs - 1, L.size - 1);
      } else {
        const mid = at + cs / 2;
        ctx.globalAlpha = 0.6;
        ctx.beginPath();
        if (axis === "row") {
          ctx.moveTo(L.left, L.top + mid);
          ctx.lineTo(L.left + L.size, L.top + mid);
        } else {
          ctx.moveTo(L.left + mid, L.top);
          ctx.lineTo(L.left + mid, L.top + L.size);
        }
        ctx.lineWidth = 1;
        ctx.stroke();
        ctx.globalAlpha = 1;
        ctx.beginPath();
        if (axis === "row") {
          ctx.moveTo(L.left - 1, L.top + mid);
          ctx.lineTo(L.left - 7, L.top + mid - 4);
          ctx.lineTo(L.left - 7, L.top + mid + 4);
        } else {
          ctx.moveTo(L.left + mid, L.top - 1);
          ctx.lineTo(L.left + mid - 4, L.top - 7);
          ctx.lineTo(L.left + mid + 4, L.top - 7);
        }
        ctx.fill();
      }
      ctx.restore();
    };
    const rowRect = (r: number, colour: string, width: number) => mark(r, "row", colour, width);
    const colRect = (c: number, colour: string, width: number) => mark(c, "col", colour, width);
    if (hover.dest !== NONE) rowRect(hover.dest, "#333", 1);
    if (hover.src !== NONE) colRect(hover.src, "#333", 1);
    if (s.dest !== NONE) rowRect(s.dest, SELECT, 1.5);
    if (s.src !== NONE && s.dest === NONE) colRect(s.src, SELECT, 1.5);
    if (s.dest !== NONE && s.src !== NONE && view.r0 <= s.dest && s.dest < view.r0 + view.size && view.c0 <= s.src && s.src < view.c0 + view.size) {
      const pad = Math.max(0, Math.min(2, (6 - cs) / 2));
      ctx.save();
      ctx.strokeStyle = "#fff";
      ctx.lineWidth = 3;
      ctx.strokeRect(L.left + (s.src - view.c0) * cs - pad, L.top + (s.dest - view.r0) * cs - pad, cs + 2 * pad, cs + 2 * pad);
      ctx.strokeStyle = SELECT;
      ctx.lineWidth = 1.5;
      ctx.strokeRect(L.left + (s.src - view.c0) * cs - pad, L.top + (s.dest - view.r0) * cs - pad, cs + 2 * pad, cs + 2 * pad);
      ctx.restore();
    }
  }

  // ---- legend, words
  function drawLegend(s: { layer: number; head: number }, d: Data): void {
    const items: HTMLElement[] = [];
    const bar = (lut: Lut, left: string, middle: string, right: string, title: string) => {
      const wrap = el(doc, "span", "cw-bar");
      const swatch = el(doc, "i");
      swatch.style.background = lutGradient(lut);
      wrap.append(el(doc, "span", undefined, left), swatch, el(doc, "span", undefined, right));
      wrap.title = title;
      if (middle) wrap.prepend(el(doc, "span", undefined, middle));
      return wrap;
    };
    const what = kind() === "value" ? "value-weighted (row-normalised)" : "attention";
    const scaleNote = colourScale === "row" ? ", each row ÷ its max" : colourScale === "gamma" ? ", √ scale" : "";
    items.push(
      bar(
        ATTENTION,
        "0",
        `${what}${scaleNote}`,
        colourScale === "row" ? "row max" : "1",
        (kind() === "value" ? "A[dest, src] · ‖v_src W_O‖, divided by its row sum" : "Attention weight") +
          (colourScale === "row" ? "; colour relative to the row's largest weight" : colourScale === "gamma" ? "; colour ∝ √weight" : ""),
      ),
    );
    if (d.effect !== null) {
      const limit = absMax(d.effect, (s.layer * d.raw.nHeads + s.head) * d.raw.nTokens, d.raw.nTokens);
      items.push(bar(DIVERGING, fmt(-limit), "logit effect on next token", `+${fmt(limit)}`, "(r_i W_O W_U)[next token]: blue lowers, red raises its logit"));
    }
    if (model.get("show_diagonals")) {
      (model.get("diagonals") ?? []).forEach((diag, k) => {
        const chip = el(doc, "span", "cw-chip");
        chip.style.borderTopColor = DIAGONAL_COLOURS[k % DIAGONAL_COLOURS.length] as string;
        const item = el(doc, "span");
        item.append(chip, doc.createTextNode(`${diag.label} (dest − src = ${diag.offset})`));
        items.push(item);
      });
    }
    legend.replaceChildren(...items);
  }

  function topOf(weights: Float32Array, exclude = NONE): number {
    let best = NONE;
    let bestW = -1;
    weights.forEach((w, i) => {
      if (i !== exclude && w > bestW) {
        bestW = w;
        best = i;
      }
    });
    return best;
  }

  function statusText(s: { layer: number; head: number; dest: number; src: number }, p: Patterns, d: Data): string {
    const parts = [`Layer ${s.layer}, head ${s.head} (${kind() === "value" ? "value-weighted" : "raw"} pattern)`];
    if (!headReady(p, s.layer, s.head)) parts.push("loading");
    else if (s.dest !== NONE && s.src !== NONE) {
      const w = weightAt(p, s.layer, s.head, s.dest, s.src);
      parts.push(`destination ${describe(s.dest)} → source ${describe(s.src)}: ${w < 0 ? "masked (later token)" : fmt(w / 255, 3)}`);
    } else if (s.dest !== NONE) {
      const row = rowWeights(p, s.layer, s.head, s.dest);
      const top = topOf(row);
      parts.push(`destination ${describe(s.dest)} attends most to ${describe(top)} (${fmt(row[top] ?? 0, 3)})`);
    } else if (s.src !== NONE) {
      const col = columnWeights(p, s.layer, s.head, s.src);
      const top = topOf(col);
      parts.push(`source ${describe(s.src)} is attended most by ${describe(top)} (${fmt(col[top] ?? 0, 3)})`);
    } else parts.push("no token selected: click a token or a cell");
    if (s.dest !== NONE && d.effect !== null) {
      const v = d.effect[(s.layer * p.nHeads + s.head) * p.nTokens + s.dest] as number;
      const next = d.tokens[s.dest + 1];
      if (next !== undefined && !Number.isNaN(v)) parts.push(`logit effect on next token “${tokenLabel(next, 18).text}”: ${v >= 0 ? "+" : ""}${fmt(v)}`);
    }
    if (d.raw.ready !== null) parts.push(`heads loaded ${readyCount(d.raw)} of ${d.raw.nLayers * d.raw.nHeads}`);
    return `${parts.join(" · ")}.`;
  }

  function hoverText(s: { layer: number; head: number }, p: Patterns, d: Data): string {
    const { dest, src } = hover;
    if (!headReady(p, s.layer, s.head) || (dest === NONE && src === NONE)) return "";
    if (dest !== NONE && src !== NONE) {
      const raw = weightAt(d.raw, s.layer, s.head, dest, src);
      if (raw < 0) return `${describe(dest)} → ${describe(src)}: masked (a destination only attends to earlier tokens)`;
      let text = `${describe(dest)} → ${describe(src)}: attention ${fmt(raw / 255, 3)}`;
      if (d.value !== null && headReady(d.value, s.layer, s.head)) text += ` · value-weighted ${fmt(weightAt(d.value, s.layer, s.head, dest, src) / 255, 3)}`;
      if (d.norms !== null) {
        const norm = d.norms[(s.layer * p.nHeads + s.head) * p.nTokens + src] as number;
        text += ` · A·‖vW_O‖ ≈ ${fmt((raw / 255) * norm, 3)}`;
      }
      return text;
    }
    if (dest !== NONE) {
      let text = `destination ${describe(dest)}`;
      if (d.effect !== null) {
        const v = d.effect[(s.layer * p.nHeads + s.head) * p.nTokens + dest] as number;
        const next = d.tokens[dest + 1];
        text += next === undefined || Number.isNaN(v) ? " (last token: no next token)" : ` · logit effect on “${tokenLabel(next, 18).text}”: ${v >= 0 ? "+" : ""}${fmt(v)}`;
      }
      return text;
    }
    return `source ${describe(src)}: shading shows how much each destination attends to it`;
  }

  // ---- tokens
  function shadeTokens(s: { layer: number; head: number; dest: number; src: number }, p: Patterns, d: Data): void {
    let key = 0;
    if (tokenMode === "logit" && d.effect !== null) {
      const off = (s.layer * p.nHeads + s.head) * p.nTokens;
      const values = d.effect.subarray(off, off + p.nTokens);
      shadeIndices(values, shadeNext, absMax(d.effect, off, p.nTokens) || 1);
      key = 1;
    } else if (!headReady(p, s.layer, s.head)) shadeIndices(null, shadeNext);
    else if (hover.dest !== NONE) shadeIndices(scaleWeights(rowWeights(p, s.layer, s.head, hover.dest), colourScale), shadeNext);
    else if (hover.src !== NONE) shadeIndices(scaleWeights(columnWeights(p, s.layer, s.head, hover.src), colourScale), shadeNext);
    else if (s.dest !== NONE) shadeIndices(scaleWeights(rowWeights(p, s.layer, s.head, s.dest), colourScale), shadeNext);
    else if (s.src !== NONE) shadeIndices(scaleWeights(columnWeights(p, s.layer, s.head, s.src), colourScale), shadeNext);
    else shadeIndices(null, shadeNext);
    applyShades(tokenSpans, shadeNext, shadePrev, key === 1 ? DIVERGING : ATTENTION, key, shadeKey);
  }

  let marked: { dest: number; src: number; hovered: number } = { dest: NONE, src: NONE, hovered: NONE };
  function markTokens(s: { dest: number; src: number }): void {
    const hovered = hover.dest !== NONE && hover.src === NONE ? hover.dest : hover.src !== NONE && hover.dest === NONE ? hover.src : NONE;
    const set = (i: number, cls: string, on: boolean) => {
      if (i !== NONE) tokenSpans[i]?.classList.toggle(cls, on);
    };
    set(marked.dest, "cw-dest", false);
    set(marked.src, "cw-src", false);
    set(marked.hovered, "cw-hovered", false);
    set(s.dest, "cw-dest", true);
    set(s.src, "cw-src", true);
    set(hovered, "cw-hovered", true);
    marked = { dest: s.dest, src: s.src, hovered };
  }

  // ---- one frame
  /** Write text only when it changed (a rewrite invalidates layout even when equal). */
  function setText(node: HTMLElement, text: string): void {
    if (node.textContent !== text) node.textContent = text;
  }

  let chromeKey = "";
  /** Controls, caption, legend: only when something they show changed, not on every hover. */
  function drawChrome(s: { layer: number; head: number; dest: number; src: number }, p: Patterns, d: Data): void {
    const key = [s.layer, s.head, kind(), tokenMode, hoverMode, colourScale, view.r0, view.c0, view.size, model.get("show_diagonals"), version].join("|");
    if (key === chromeKey) return;
    chromeKey = key;
    thumbButtons.forEach((b, i) => b.classList.toggle("cw-selected", i === s.layer * p.nHeads + s.head));
    kindControl.update(kind());
    tokenControl.update(tokenMode);
    hoverControl.update(hoverMode);
    scaleControl.update(colourScale);
    const valueButton = kindControl.element.querySelector<HTMLButtonElement>('button[data-value="value"]');
    if (valueButton) valueButton.disabled = d.value === null;
    const logitButton = tokenControl.element.querySelector<HTMLButtonElement>('button[data-value="logit"]');
    if (logitButton) logitButton.disabled = d.effect === null;
    diagBox.checked = Boolean(model.get("show_diagonals"));
    resetButton.disabled = isFull(view, p.nTokens);
    setText(
      zoomText,
      isFull(view, p.nTokens)
        ? p.nTokens > 16
          ? WHEEL_HINT
          : ""
        : `rows ${view.r0}–${view.r0 + view.size - 1}, columns ${view.c0}–${view.c0 + view.size - 1} of ${p.nTokens}`,
    );
    setText(caption, `${headName(s.layer, s.head)}: rows are destinations (queries), columns sources (keys)`);
    canvas.setAttribute("aria-label", `Attention pattern of layer ${s.layer}, head ${s.head}`);
    drawLegend(s, d);
    setText(
      tokensHead,
      tokenMode === "logit" && d.effect !== null
        ? "Tokens shaded by this head's direct effect on the logit of the next token (blue lowers, red raises)."
        : hoverMode === "dest"
          ? "Hover a token to shade where it attends; click to select it as destination."
          : "Hover a token to shade which tokens attend to it; click to select it as source.",
    );
  }

  function draw(): void {
    const started = performance.now();
    const d = data;
    const p = shown();
    const s = sel();
    if (d === null || p === null || s === null) return;
    drawChrome(s, p, d);
    drawMain(s, p, d);
    shadeTokens(s, p, d);
    markTokens(s);
    setText(hoverLine, hoverText(s, p, d));
    setText(panel.status, statusText(s, p, d));
    root.dataset.cwDrawMs = (performance.now() - started).toFixed(2);
    if (!painted && headReady(p, s.layer, s.head)) {
      painted = true;
      root.dataset.cwPainted = performance.now().toFixed(1);
    }
  }

  const frame = perFrame(draw);

  function scrollToToken(i: number): void {
    const span = tokenSpans[i];
    if (span === undefined) return;
    const top = span.offsetTop - tokenBox.offsetTop;
    if (top < tokenBox.scrollTop || top > tokenBox.scrollTop + tokenBox.clientHeight - span.offsetHeight) {
      tokenBox.scrollTop = Math.max(0, top - tokenBox.clientHeight / 2);
    }
  }

  // ---- events
  function tokenIndex(event: Event): number {
    const target = (event.target as Element | null)?.closest?.("[data-cw-token]");
    return target instanceof HTMLElement ? Number(target.dataset.cwToken) : NONE;
  }

  function canvasPoint(event: MouseEvent): { x: number; y: number } {
    // the canvas may be drawn smaller than its layout (CSS max-width in a narrow container)
    const rect = canvas.getBoundingClientRect();
    const L = layout();
    const k = rect.width > 0 ? L.width / rect.width : 1;
    return { x: (event.clientX - rect.left) * k, y: (event.clientY - rect.top) * k };
  }

  let drag: { x: number; y: number; view: Viewport; moved: boolean } | null = null;

  function setView(next: Viewport): void {
    const n = data?.raw.nTokens ?? 0;
    const v = clampView(next, n);
    if (v.r0 !== view.r0 || v.c0 !== view.c0 || v.size !== view.size) {
      view = v;
      frame.schedule();
    }
  }

  cleanups.push(
    kindControl.cleanup,
    scaleControl.cleanup,
    tokenControl.cleanup,
    hoverControl.cleanup,
    listen(diagBox, "change", () => setTraits(model, { show_diagonals: diagBox.checked })),
    listen(resetButton, "click", () => setView(fullView(data?.raw.nTokens ?? 0))),
    listen(thumbs, "click", (event) => {
      const button = (event.target as Element | null)?.closest?.("[data-cw-head]");
      if (!(button instanceof HTMLElement)) return;
      const [layer = 0, head = 0] = (button.dataset.cwHead ?? "").split(".").map(Number);
      setTraits(model, { selected_layer: layer, selected_head: head });
      frame.schedule();
    }),
    listen(tokenBox, "click", (event) => {
      const i = tokenIndex(event);
      if (i === NONE) return;
      if (hoverMode === "src") setTraits(model, { selected_src: toggle(model.get("selected_src"), i) });
      else setTraits(model, { selected_dest: toggle(model.get("selected_dest"), i) });
      frame.schedule();
    }),
    listen(tokenBox, "mouseover", (event) => {
      const i = tokenIndex(event);
      const next = hoverMode === "src" ? { dest: NONE, src: i } : { dest: i, src: NONE };
      if (next.dest !== hover.dest || next.src !== hover.src) {
        hover = next;
        frame.schedule();
      }
    }),
    listen(tokenBox, "mouseleave", () => {
      hover = { dest: NONE, src: NONE };
      frame.schedule();
    }),
    listen(canvas, "pointerdown", (event) => {
      if (event.button !== 0) return;
      drag = { ...canvasPoint(event), view, moved: false };
      canvas.setPointerCapture?.(event.pointerId);
    }),
    listen(canvas, "pointermove", (event) => {
      if (data === null) return;
      const pt = canvasPoint(event);
      const L = layout();
      if (drag !== null) {
        const dx = pt.x - drag.x;
        const dy = pt.y - drag.y;
        if (!drag.moved && Math.hypot(dx, dy) > 3) {
          drag.moved = true;
          canvas.classList.add("cw-dragging");
        }
        if (drag.moved) {
          const cellPx = L.size / drag.view.size;
          setView(panBy(drag.view, data.raw.nTokens, -dy / cellPx, -dx / cellPx));
          return;
        }
      }
      const hit = hitTest(L, view, pt.x, pt.y);
      const next =
        hit === null ? { dest: NONE, src: NONE } : hit.area === "cell" ? { dest: hit.row, src: hit.col } : hit.area === "col" ? { dest: NONE, src: hit.col } : { dest: hit.row, src: NONE };
      if (next.dest !== hover.dest || next.src !== hover.src) {
        hover = next;
        frame.schedule();
      }
    }),
    listen(canvas, "pointerup", (event) => {
      const wasDrag = drag?.moved === true;
      drag = null;
      canvas.classList.remove("cw-dragging");
      if (wasDrag || data === null) return;
      const pt = canvasPoint(event);
      const hit = hitTest(layout(), view, pt.x, pt.y);
      if (hit === null) return;
      const s = sel();
      if (hit.area === "cell") {
        const same = s !== null && s.dest === hit.row && s.src === hit.col;
        setTraits(model, same ? { selected_dest: NONE, selected_src: NONE } : { selected_dest: hit.row, selected_src: hit.col });
        if (!same) scrollToToken(hit.row);
      } else if (hit.area === "col") setTraits(model, { selected_src: toggle(model.get("selected_src"), hit.col) });
      else setTraits(model, { selected_dest: toggle(model.get("selected_dest"), hit.row), selected_src: NONE });
      frame.schedule();
    }),
    listen(canvas, "pointerleave", () => {
      if (drag !== null) return;
      hover = { dest: NONE, src: NONE };
      frame.schedule();
    }),
    listen(canvas, "dblclick", () => setView(fullView(data?.raw.nTokens ?? 0))),
    listen(canvas, "wheel", (event) => {
      if (data === null || data.raw.nTokens <= 8) return;
      const L = layout();
      const pt = canvasPoint(event);
      const fx = (pt.x - L.left) / L.size;
      const fy = (pt.y - L.top) / L.size;
      if (!(fx >= 0 && fx < 1 && fy >= 0 && fy < 1)) return;
      if (!wheelZooms(event, canvas.matches(":focus"))) return; // the page scrolls
      event.preventDefault();
      const factor = Math.exp(Math.max(-0.5, Math.min(0.5, event.deltaY * 0.002)));
      setView(zoomAt(view, data.raw.nTokens, factor, fy, fx));
    }),
    listen(canvas, "keydown", (event) => {
      const s = sel();
      if (data === null || s === null) return;
      const n = data.raw.nTokens;
      const clampIdx = (i: number) => Math.max(0, Math.min(n - 1, i));
      let handled = true;
      switch (event.key) {
        case "ArrowUp":
        case "ArrowDown":
          setTraits(model, { selected_dest: clampIdx((s.dest === NONE ? 0 : s.dest) + (event.key === "ArrowUp" ? -1 : 1)) });
          break;
        case "ArrowLeft":
        case "ArrowRight":
          setTraits(model, { selected_src: clampIdx((s.src === NONE ? 0 : s.src) + (event.key === "ArrowLeft" ? -1 : 1)) });
          break;
        case "+":
        case "=":
          setView(zoomAt(view, n, 0.7, 0.5, 0.5));
          break;
        case "-":
          setView(zoomAt(view, n, 1 / 0.7, 0.5, 0.5));
          break;
        case "0":
          setView(fullView(n));
          break;
        case "Escape":
          setTraits(model, { selected_dest: NONE, selected_src: NONE });
          break;
        default:
          handled = false;
      }
      if (handled) {
        event.preventDefault();
        frame.schedule();
      }
    }),
    onTraits(model, ["tokens"], () => {
      loadTokens();
      loadArrays();
      frame.schedule();
    }),
    onTraits(model, ["patterns", "value_patterns", "causal", "value_norms", "logit_effect"], () => {
      loadArrays();
      frame.schedule();
    }),
    onTraits(model, ["pattern_kind"], () => {
      version++;
      queueAllThumbs();
      frame.schedule();
    }),
    onTraits(model, ["diagonals"], () => {
      version++;
      frame.schedule();
    }),
    onTraits(model, ["selected_layer", "selected_head", "selected_dest", "selected_src", "show_diagonals"], frame.schedule),
    onTraits(model, ["selected_dest"], () => {
      const d = model.get("selected_dest");
      if (typeof d === "number" && d >= 0) scrollToToken(d);
    }),
    onTraits(model, ["selected_dest", "selected_src"], () => {
      // a zoomed view follows a selection made elsewhere (tokens, Python, a linked view)
      const s = sel();
      if (data !== null && s !== null) setView(followSelection(view, data.raw.nTokens, s.dest, s.src));
    }),
  );
  // fit the container: redraw when its width changes (a narrow notebook, the explorer's grid)
  const Resize = doc.defaultView?.ResizeObserver;
  if (Resize !== undefined) {
    let width = panel.body.clientWidth;
    const observer = new Resize(() => {
      if (panel.body.clientWidth !== width) {
        width = panel.body.clientWidth;
        frame.schedule();
      }
    });
    observer.observe(panel.body);
    cleanups.push(() => observer.disconnect());
  }
  const customHandler = (content: unknown, buffers: unknown) => onCustom(content, buffers);
  model.on("msg:custom", customHandler);
  cleanups.push(() => model.off("msg:custom", customHandler));

  loadTokens();
  loadArrays();
  draw();

  return () => {
    frame.cancel();
    thumbFrame.cancel();
    for (const cleanup of cleanups) cleanup();
    tokensHead.remove();
    tokenBox.remove();
    panel.cleanup();
  };
}

