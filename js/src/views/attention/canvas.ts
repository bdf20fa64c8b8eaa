// Drawing the main canvas: the pattern image (already rasterised), token
// labels or position ticks, the strip (logit effect or loss), offset diagonals, and the
// hovered and selected rows, columns and cell.

import { blit, cellImage } from "../../lib/heatmap";
import { NONE } from "../../lib/selection";
import { tokenLabel } from "../../lib/tokens";
import { diagonalInView, ticks, type Viewport } from "../../lib/viewport";
import {
  DIAGONAL_COLOURS,
  EMPTY_RGBA,
  type Hover,
  LABEL_MIN_CELL,
  type Layout,
  SELECT,
  type Sel,
  STRIP_GAP,
  STRIP_W,
  stripCells,
} from "./layout";
import { type Strip, stripIndex, stripLut } from "./strip";

export interface MainScene {
  layout: Layout;
  view: Viewport;
  sel: Sel;
  hover: Hover;
  tokens: readonly string[];
  /** The pattern rasterised for the view, or null: then `message` is written in its place. */
  image: HTMLCanvasElement | null;
  message: string;
  /** What the strip beside the pattern shows (the head's logit effects, or the loss), or null. */
  strip: Strip | null;
  diagonals: readonly { offset: number }[];
}

/** Draw the whole main canvas for `scene`. */
export function drawScene(doc: Document, ctx: CanvasRenderingContext2D, scene: MainScene): void {
  const { layout: L, view } = scene;
  ctx.clearRect(0, 0, L.width, L.height);
  ctx.fillStyle = "#f4f4f4";
  ctx.fillRect(L.left, L.top, L.size, L.size);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#666";
  ctx.textBaseline = "alphabetic";
  ctx.textAlign = "left";
  ctx.fillText("dest ↓  src →", 4, 12);
  if (scene.image === null) {
    ctx.fillStyle = "#555";
    ctx.textAlign = "center";
    ctx.fillText(scene.message, L.left + L.size / 2, L.top + L.size / 2);
    return;
  }
  blit(ctx, scene.image, L.left, L.top, L.size, L.size);
  const cs = L.size / Math.max(1, view.size);
  drawLabels(ctx, scene, cs);
  if (L.strip && scene.strip !== null) drawStrip(doc, ctx, scene);
  drawDiagonals(ctx, scene, cs);
  drawMarks(ctx, scene, cs);
}

function drawLabels(ctx: CanvasRenderingContext2D, { layout: L, view, sel: s, hover, tokens }: MainScene, cs: number): void {
  // token text when cells are tall enough, else positions
  ctx.fillStyle = "#333";
  const emphasis = (i: number, axis: "row" | "col") => (axis === "row" ? i === s.dest || i === hover.dest : i === s.src || i === hover.src);
  if (cs >= LABEL_MIN_CELL) {
    ctx.font = `${Math.min(12, Math.max(8, Math.floor(cs * 0.85)))}px ui-monospace, SFMono-Regular, Menlo, monospace`;
    ctx.textBaseline = "middle";
    for (let r = 0; r < view.size; r++) {
      const i = view.r0 + r;
      ctx.fillStyle = emphasis(i, "row") ? SELECT : "#333";
      ctx.textAlign = "right";
      ctx.fillText(tokenLabel(tokens[i] ?? "", 11).text, L.left - 4, L.top + (r + 0.5) * cs, L.left - 8);
    }
    for (let c = 0; c < view.size; c++) {
      const i = view.c0 + c;
      ctx.save();
      ctx.translate(L.left + (c + 0.5) * cs, L.top - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillStyle = emphasis(i, "col") ? SELECT : "#333";
      ctx.textAlign = "left";
      ctx.fillText(tokenLabel(tokens[i] ?? "", 8).text, 0, 0, L.top - 18);
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
}

function drawStrip(doc: Document, ctx: CanvasRenderingContext2D, { layout: L, view, strip }: MainScene): void {
  if (strip === null) return;
  const x = L.left + L.size + STRIP_GAP;
  const dpr = globalThis.devicePixelRatio || 1;
  ctx.fillStyle = "#f4f4f4";
  ctx.fillRect(x, L.top, STRIP_W, L.size);
  const cells = stripCells(strip.values, strip.offset, view, L.size * dpr, strip.limit, (v) => stripIndex(strip, v));
  const image = cellImage(doc, cells, stripLut(strip), EMPTY_RGBA);
  if (image !== null) blit(ctx, image, x, L.top, STRIP_W, L.size);
  ctx.save();
  ctx.translate(x + STRIP_W / 2 + 3, L.top - 4);
  ctx.rotate(-Math.PI / 2);
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillStyle = "#555";
  ctx.textAlign = "left";
  ctx.fillText(strip.kind === "loss" ? "loss" : "logit", 0, 0);
  ctx.restore();
}

function drawDiagonals(ctx: CanvasRenderingContext2D, { layout: L, view, diagonals }: MainScene, cs: number): void {
  diagonals.forEach((diag, k) => {
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

/** A row or column: outlined when cells are big enough, else a thin line with a marker in the margin. */
function mark(ctx: CanvasRenderingContext2D, L: Layout, view: Viewport, cs: number, i: number, axis: "row" | "col", colour: string, width: number): void {
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
}

function drawMarks(ctx: CanvasRenderingContext2D, { layout: L, view, sel: s, hover }: MainScene, cs: number): void {
  if (hover.dest !== NONE) mark(ctx, L, view, cs, hover.dest, "row", "#333", 1);
  if (hover.src !== NONE) mark(ctx, L, view, cs, hover.src, "col", "#333", 1);
  if (s.dest !== NONE) mark(ctx, L, view, cs, s.dest, "row", SELECT, 1.5);
  if (s.src !== NONE && s.dest === NONE) mark(ctx, L, view, cs, s.src, "col", SELECT, 1.5);
  const inView = view.r0 <= s.dest && s.dest < view.r0 + view.size && view.c0 <= s.src && s.src < view.c0 + view.size;
  if (s.dest !== NONE && s.src !== NONE && inView) {
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
