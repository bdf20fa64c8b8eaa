// The layers × heads grid of thumbnails: one button per head over one shared
// canvas. Only the thumbnails on screen are drawn (./visible.ts), a few per
// animation frame, the selected head first: a 32 × 32-head model paints what
// is in view and the rest as it is scrolled to. The grid scrolls within a
// bounded height; its head and layer labels stay in view (sticky).
//
// One canvas, not one per head: with a canvas per thumbnail, every frame that
// draws thumbnails costs the browser more as more canvases hold pixels
// (measured in headless Chromium: frames of 100–400 ms by the 500th
// thumbnail, against 17 ms with one canvas).

import type { ColourScale } from "../../lib/attentionui";
import { el } from "../../lib/dom";
import { NO_EXPORT } from "../../lib/export";
import { blit, cellImage } from "../../lib/heatmap";
import { ATTENTION } from "../../lib/shading";
import { fullView } from "../../lib/viewport";
import { EMPTY_RGBA } from "./layout";
import type { PatternSource } from "./source";
import { LazyPainter } from "./visible";

export class Thumbs {
  private buttons: HTMLButtonElement[] = [];
  private cells: HTMLElement[] = [];
  private px = 40;
  private shape = "";
  /** Every thumbnail, drawn where its button's cell lies (behind the buttons, scrolling with them). */
  private readonly canvas: HTMLCanvasElement;
  /** One off-screen canvas every thumbnail's cells are drawn into before scaling. */
  private readonly scratch: HTMLCanvasElement;
  private readonly painter = new LazyPainter(
    (i) => this.draw(i),
    (stats) => {
      // counters for the browser tests (thumbnails painted, time spent painting, when the last was painted)
      this.box.dataset.cwThumbsPainted = String(stats.painted);
      this.box.dataset.cwThumbsMs = stats.ms.toFixed(1);
      this.box.dataset.cwThumbsAt = performance.now().toFixed(1);
    },
  );

  /**
   * @param box the grid's element
   * @param source the pattern shown (raw or value-weighted), read at drawing time
   * @param scale the colour scale, read at drawing time
   */
  constructor(
    private readonly doc: Document,
    readonly box: HTMLElement,
    private readonly source: () => PatternSource | null,
    private readonly scale: () => ColourScale,
  ) {
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Heads");
    this.canvas = el(doc, "canvas", "cw-thumbs-canvas");
    this.canvas.width = this.canvas.height = 0;
    this.scratch = doc.createElement("canvas");
  }

  /** The grid for `p`'s heads (rebuilt only when the number of layers or heads changes); every thumbnail queued, `first` first. */
  build(p: PatternSource, first: number): void {
    const shape = `${p.nLayers}x${p.nHeads}`;
    if (shape === this.shape) {
      for (const [i, button] of this.buttons.entries()) button.classList.toggle("cw-pending", !p.complete(Math.floor(i / p.nHeads), i % p.nHeads));
      this.queueAll(first);
      return;
    }
    this.shape = shape;
    const doc = this.doc;
    this.px = Math.max(22, Math.min(48, Math.floor(380 / Math.max(1, p.nHeads))));
    this.box.style.gridTemplateColumns = `auto repeat(${p.nHeads}, auto)`;
    const items: HTMLElement[] = [this.canvas, el(doc, "span", "cw-axis cw-corner")];
    for (let head = 0; head < p.nHeads; head++) items.push(el(doc, "span", "cw-axis cw-col-axis", `H${head}`));
    this.buttons = [];
    this.cells = [];
    for (let layer = 0; layer < p.nLayers; layer++) {
      items.push(el(doc, "span", "cw-axis cw-row-axis", `L${layer}`));
      for (let head = 0; head < p.nHeads; head++) {
        const button = el(doc, "button", "cw-thumb");
        button.type = "button";
        button.dataset.cwHead = `${layer}.${head}`;
        button.title = `Layer ${layer}, head ${head}`;
        button.setAttribute("aria-label", `Layer ${layer}, head ${head}`);
        button.classList.toggle("cw-pending", !p.complete(layer, head));
        // the square the thumbnail is drawn under (the shared canvas shows through)
        const cell = el(doc, "span", "cw-thumb-cell");
        cell.style.width = cell.style.height = `${this.px}px`;
        button.append(cell);
        this.buttons.push(button);
        this.cells.push(cell);
        items.push(button);
      }
    }
    this.box.replaceChildren(...items);
    this.box.dataset.cwThumbs = String(this.buttons.length);
    this.canvas.width = this.canvas.height = 0;
    this.painter.observe(this.buttons, first);
  }

  /** Redraw every thumbnail: those on screen now (`first` first), the others when scrolled to. */
  queueAll(first: number): void {
    this.painter.invalidate(first);
  }

  /** Redraw thumbnail `i` (`layer * nHeads + head`), soon when `front` (now marked ready or pending, drawn or not). */
  queueOne(i: number, front = false): void {
    const p = this.source();
    if (p !== null) this.buttons[i]?.classList.toggle("cw-pending", !p.complete(Math.floor(i / p.nHeads), i % p.nHeads));
    this.painter.invalidateOne(i, front);
  }

  /** Mark the selected head's button. */
  select(i: number): void {
    this.buttons.forEach((b, k) => b.classList.toggle("cw-selected", k === i));
  }

  /** The head (`[layer, head]`) of a clicked element, or null. */
  static headOf(event: Event): [number, number] | null {
    const button = (event.target as Element | null)?.closest?.("[data-cw-head]");
    if (!(button instanceof HTMLElement)) return null;
    const [layer = 0, head = 0] = (button.dataset.cwHead ?? "").split(".").map(Number);
    return [layer, head];
  }

  /** The shared canvas, sized to the grid's content (cleared, and every thumbnail queued again, when that changes). */
  private context(): CanvasRenderingContext2D | null {
    const dpr = globalThis.devicePixelRatio || 1;
    const width = this.box.scrollWidth;
    const height = this.box.scrollHeight;
    if (width === 0 || height === 0) return null;
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(height * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
      // a grid larger than its box is a tool, not a figure: it stays out of PNG/SVG exports
      this.box.toggleAttribute(NO_EXPORT, height > this.box.clientHeight + 1 || width > this.box.clientWidth + 1);
      this.painter.invalidate();
    }
    const ctx = this.canvas.getContext("2d");
    ctx?.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  private draw(i: number): void {
    const p = this.source();
    const cell = this.cells[i];
    const button = this.buttons[i];
    if (p === null || cell === undefined || button === undefined) return;
    const ctx = this.context();
    if (ctx === null) return;
    const layer = Math.floor(i / p.nHeads);
    const head = i % p.nHeads;
    const ready = p.ready(layer, head);
    button.classList.toggle("cw-pending", !p.complete(layer, head));
    // the cell's place in the grid's content (the box is its offset parent)
    const x = cell.offsetLeft;
    const y = cell.offsetTop;
    const px = this.px;
    ctx.clearRect(x, y, px, px);
    ctx.fillStyle = "#f4f4f4";
    ctx.fillRect(x, y, px, px);
    if (!ready) return;
    const dpr = globalThis.devicePixelRatio || 1;
    const cells = p.cells(layer, head, fullView(p.nTokens), px * dpr, this.scale());
    const image = cellImage(this.doc, cells, ATTENTION, EMPTY_RGBA, this.scratch);
    if (image !== null) blit(ctx, image, x, y, px, px);
  }

  /** Stop drawing. */
  cancel(): void {
    this.painter.cancel();
  }
}
