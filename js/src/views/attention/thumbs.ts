// The layers × heads grid of thumbnails: one button (with a canvas) per head,
// drawn a few per animation frame (the selected head first) so that many
// heads never block the page.

import type { ColourScale } from "../../lib/attentionui";
import { el } from "../../lib/dom";
import { blit, cellImage, sizeCanvas } from "../../lib/heatmap";
import { perFrame } from "../../lib/selection";
import { ATTENTION } from "../../lib/shading";
import { fullView } from "../../lib/viewport";
import { EMPTY_RGBA } from "./layout";
import type { PatternSource } from "./source";

const THUMB_BUDGET_MS = 8;

export class Thumbs {
  private buttons: HTMLButtonElement[] = [];
  private canvases: HTMLCanvasElement[] = [];
  private queue: number[] = [];
  private px = 40;
  private readonly frame = perFrame(() => {
    const start = performance.now();
    while (this.queue.length > 0 && performance.now() - start < THUMB_BUDGET_MS) this.draw(this.queue.shift() as number);
    if (this.queue.length > 0) this.frame.schedule();
  });

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

  /** Rebuild the grid for `p`'s heads and queue every thumbnail (`first` first). */
  build(p: PatternSource, first: number): void {
    const doc = this.doc;
    this.px = Math.max(22, Math.min(48, Math.floor(380 / Math.max(1, p.nHeads))));
    this.box.style.gridTemplateColumns = `auto repeat(${p.nHeads}, auto)`;
    const cells: HTMLElement[] = [el(doc, "span")];
    for (let head = 0; head < p.nHeads; head++) cells.push(el(doc, "span", "cw-axis", `H${head}`));
    this.buttons = [];
    this.canvases = [];
    for (let layer = 0; layer < p.nLayers; layer++) {
      cells.push(el(doc, "span", "cw-axis", `L${layer}`));
      for (let head = 0; head < p.nHeads; head++) {
        const button = el(doc, "button", "cw-thumb");
        button.type = "button";
        button.dataset.cwHead = `${layer}.${head}`;
        button.title = `Layer ${layer}, head ${head}`;
        button.setAttribute("aria-label", `Layer ${layer}, head ${head}`);
        button.classList.toggle("cw-pending", !p.ready(layer, head));
        const c = el(doc, "canvas");
        sizeCanvas(c, this.px, this.px);
        button.append(c);
        this.buttons.push(button);
        this.canvases.push(c);
        cells.push(button);
      }
    }
    this.box.replaceChildren(...cells);
    this.queueAll(first);
  }

  /** Redraw every thumbnail, `first` first. */
  queueAll(first: number): void {
    this.queue = [first];
    for (let i = 0; i < this.buttons.length; i++) if (i !== first) this.queue.push(i);
    this.frame.schedule();
  }

  /** Redraw thumbnail `i` (`layer * nHeads + head`), soon when `front`. */
  queueOne(i: number, front = false): void {
    if (!this.queue.includes(i)) {
      if (front) this.queue.unshift(i);
      else this.queue.push(i);
    }
    this.frame.schedule();
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
    this.frame.cancel();
  }
}
