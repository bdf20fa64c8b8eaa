// The layers × heads grid of thumbnails: one button (with a canvas) per head.
// Only the thumbnails on screen are drawn (./visible.ts), a few per animation
// frame, the selected head first: a 32 × 32-head model paints the few dozen
// in view, and the rest as they are scrolled to. The grid scrolls within a
// bounded height; its head and layer labels stay in view (sticky).

import type { ColourScale } from "../../lib/attentionui";
import { el } from "../../lib/dom";
import { blit, cellImage, sizeCanvas } from "../../lib/heatmap";
import { ATTENTION } from "../../lib/shading";
import { fullView } from "../../lib/viewport";
import { EMPTY_RGBA } from "./layout";
import type { PatternSource } from "./source";
import { LazyPainter } from "./visible";

export class Thumbs {
  private buttons: HTMLButtonElement[] = [];
  private canvases: HTMLCanvasElement[] = [];
  private px = 40;
  private shape = "";
  private readonly painter = new LazyPainter(
    (i) => this.draw(i),
    (stats) => {
      // counters for the browser tests (thumbnails painted, time spent painting)
      this.box.dataset.cwThumbsPainted = String(stats.painted);
      this.box.dataset.cwThumbsMs = stats.ms.toFixed(1);
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
  }

  /** The grid for `p`'s heads (rebuilt only when the number of layers or heads changes); every thumbnail queued, `first` first. */
  build(p: PatternSource, first: number): void {
    const shape = `${p.nLayers}x${p.nHeads}`;
    if (shape === this.shape) {
      for (const [i, button] of this.buttons.entries()) button.classList.toggle("cw-pending", !p.ready(Math.floor(i / p.nHeads), i % p.nHeads));
      this.queueAll(first);
      return;
    }
    this.shape = shape;
    const doc = this.doc;
    this.px = Math.max(22, Math.min(48, Math.floor(380 / Math.max(1, p.nHeads))));
    this.box.style.gridTemplateColumns = `auto repeat(${p.nHeads}, auto)`;
    const cells: HTMLElement[] = [el(doc, "span", "cw-axis cw-corner")];
    for (let head = 0; head < p.nHeads; head++) cells.push(el(doc, "span", "cw-axis cw-col-axis", `H${head}`));
    this.buttons = [];
    this.canvases = [];
    for (let layer = 0; layer < p.nLayers; layer++) {
      cells.push(el(doc, "span", "cw-axis cw-row-axis", `L${layer}`));
      for (let head = 0; head < p.nHeads; head++) {
        const button = el(doc, "button", "cw-thumb");
        button.type = "button";
        button.dataset.cwHead = `${layer}.${head}`;
        button.title = `Layer ${layer}, head ${head}`;
        button.setAttribute("aria-label", `Layer ${layer}, head ${head}`);
        button.classList.toggle("cw-pending", !p.ready(layer, head));
        const c = el(doc, "canvas");
        // laid out at its size, with no pixels until it is drawn
        c.width = 0;
        c.height = 0;
        c.style.width = c.style.height = `${this.px}px`;
        button.append(c);
        this.buttons.push(button);
        this.canvases.push(c);
        cells.push(button);
      }
    }
    this.box.replaceChildren(...cells);
    this.box.dataset.cwThumbs = String(this.buttons.length);
    this.painter.observe(this.buttons, first);
  }

  /** Redraw every thumbnail: those on screen now (`first` first), the others when scrolled to. */
  queueAll(first: number): void {
    this.painter.invalidate(first);
  }

  /** Redraw thumbnail `i` (`layer * nHeads + head`), soon when `front` (now marked ready or pending, drawn or not). */
  queueOne(i: number, front = false): void {
    const p = this.source();
    if (p !== null) this.buttons[i]?.classList.toggle("cw-pending", !p.ready(Math.floor(i / p.nHeads), i % p.nHeads));
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

  private draw(i: number): void {
    const p = this.source();
    const c = this.canvases[i];
    const button = this.buttons[i];
    if (p === null || c === undefined || button === undefined) return;
    const layer = Math.floor(i / p.nHeads);
    const head = i % p.nHeads;
    const ready = p.ready(layer, head);
    button.classList.toggle("cw-pending", !ready);
    const px = this.px;
    const ctx = sizeCanvas(c, px, px);
    if (ctx === null) return;
    ctx.clearRect(0, 0, px, px);
    ctx.fillStyle = "#f4f4f4";
    ctx.fillRect(0, 0, px, px);
    if (!ready) return;
    const dpr = globalThis.devicePixelRatio || 1;
    const image = cellImage(this.doc, p.cells(layer, head, fullView(p.nTokens), px * dpr, this.scale()), ATTENTION, EMPTY_RGBA);
    if (image !== null) blit(ctx, image, 0, 0, px, px);
  }

  /** Stop drawing. */
  cancel(): void {
    this.painter.cancel();
  }
}
