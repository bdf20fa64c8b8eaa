// Paint only what is on screen: many small canvases (1,024 head thumbnails of
// a 32 × 32-head model, a head across many prompts) are drawn when they come
// into view (an IntersectionObserver on the viewport, clipped by every
// scrolling ancestor: the thumbnail grid, the notebook), a few per animation
// frame, and repainted only when they are seen again after a change.

import { perFrame } from "../../lib/selection";

/** Time spent painting per animation frame at most (ms), so that the page stays responsive. */
const BUDGET_MS = 8;

/** Items this close to the visible area are painted too, so that scrolling shows them painted (CSS px). */
export const MARGIN_PX = 48;

/**
 * Up to this many items, the ones off screen are painted too once the visible ones are done, a few per frame:
 * a page of a small model (a report's 24 thumbnails) is then whole in a full-page capture or a printout without
 * being scrolled through. Above it (1,024 heads), only what is seen is painted.
 */
export const EAGER_MAX = 256;

export interface PaintStats {
  /** Items painted at least once. */
  painted: number;
  /** Paints done, in all. */
  paints: number;
  /** Time spent in `paint`, in all (ms). */
  ms: number;
}

export class LazyPainter {
  private elements: HTMLElement[] = [];
  private visible = new Set<number>();
  private dirty = new Uint8Array(0);
  private queue: number[] = [];
  private observer: IntersectionObserver | null = null;
  private eager = false;
  private printing: { win: Window; listener: () => void } | null = null;
  readonly stats: PaintStats = { painted: 0, paints: 0, ms: 0 };
  private readonly frame = perFrame(() => this.run());

  /**
   * @param paint draws item `i` (its element is `elements[i]`)
   * @param onFrame called after each frame that painted something (for counters)
   */
  constructor(
    private readonly paint: (i: number) => void,
    private readonly onFrame: (stats: PaintStats) => void = () => {},
  ) {}

  /** Watch `elements` (item `i` is `elements[i]`); all of them need painting, `first` first. */
  observe(elements: HTMLElement[], first = 0): void {
    this.observer?.disconnect();
    this.elements = elements;
    this.dirty = new Uint8Array(elements.length).fill(1);
    this.visible.clear();
    this.queue = [];
    this.stats.painted = 0;
    this.eager = elements.length <= EAGER_MAX;
    const win = elements[0]?.ownerDocument.defaultView ?? null;
    this.listenForPrint(win);
    const Observer = win?.IntersectionObserver;
    if (Observer === undefined) {
      // (no observer, e.g. an old host: everything counts as visible)
      elements.forEach((_, i) => this.visible.add(i));
      this.invalidate(first);
      return;
    }
    this.observer = new Observer((entries) => this.onIntersect(entries), { rootMargin: `${MARGIN_PX}px` });
    elements.forEach((element, i) => {
      element.dataset.cwItem = String(i);
      this.observer?.observe(element);
    });
  }

  /** Before printing, paint every item still dirty at once (a printout shows the whole grid, whatever its size). */
  private listenForPrint(win: Window | null): void {
    if (this.printing !== null) this.printing.win.removeEventListener("beforeprint", this.printing.listener);
    this.printing = null;
    if (win === null) return;
    const listener = () => this.paintAll();
    win.addEventListener("beforeprint", listener);
    this.printing = { win, listener };
  }

  /** Paint every dirty item now, seen or not. */
  paintAll(): void {
    for (let i = 0; i < this.elements.length; i++) if (this.dirty[i] === 1) this.paintItem(i);
  }

  private paintItem(i: number): void {
    const t0 = performance.now();
    this.paint(i);
    this.stats.ms += performance.now() - t0;
    this.stats.paints++;
    this.dirty[i] = 0;
    const element = this.elements[i];
    if (element !== undefined && element.dataset.cwPainted !== "1") {
      element.dataset.cwPainted = "1";
      this.stats.painted++;
    }
  }

  private onIntersect(entries: IntersectionObserverEntry[]): void {
    for (const entry of entries) {
      const i = Number((entry.target as HTMLElement).dataset.cwItem);
      if (entry.isIntersecting) {
        this.visible.add(i);
        if (this.dirty[i] === 1 && !this.queue.includes(i)) this.queue.push(i);
      } else {
        this.visible.delete(i);
      }
    }
    this.frame.schedule();
  }

  /** Everything needs repainting: what is visible now (`first` first), the rest when it is seen. */
  invalidate(first = -1): void {
    this.dirty.fill(1);
    this.queue = [...this.visible].sort((a, b) => a - b);
    const at = this.queue.indexOf(first);
    if (at > 0) this.queue.unshift(...this.queue.splice(at, 1));
    this.frame.schedule();
  }

  /** The next dirty item off screen, for eager painting (-1: none, or not eager). */
  private nextOffScreen(): number {
    if (!this.eager) return -1;
    for (let i = 0; i < this.dirty.length; i++) if (this.dirty[i] === 1 && !this.visible.has(i)) return i;
    return -1;
  }

  /** Item `i` needs repainting (soon when `front`, if it is visible). */
  invalidateOne(i: number, front = false): void {
    if (i < 0 || i >= this.dirty.length) return;
    this.dirty[i] = 1;
    if (!this.visible.has(i) && this.eager) this.frame.schedule(); // (painted off screen, after the visible ones)
    if (!this.visible.has(i) || this.queue.includes(i)) return;
    if (front) this.queue.unshift(i);
    else this.queue.push(i);
    this.frame.schedule();
  }

  /** Whether item `i` is on screen (or near it). */
  isVisible(i: number): boolean {
    return this.visible.has(i);
  }

  private run(): void {
    const start = performance.now();
    let any = false;
    while (this.queue.length > 0 && performance.now() - start < BUDGET_MS) {
      const i = this.queue.shift() as number;
      if (!this.visible.has(i) || this.dirty[i] !== 1) continue;
      this.paintItem(i);
      any = true;
    }
    // the visible ones done: a small grid's items off screen next, within the same budget
    let next = this.queue.length === 0 ? this.nextOffScreen() : -1;
    while (next >= 0 && performance.now() - start < BUDGET_MS) {
      this.paintItem(next);
      any = true;
      next = this.nextOffScreen();
    }
    if (this.queue.length > 0 || next >= 0) this.frame.schedule();
    if (any) this.onFrame(this.stats);
  }

  /** Stop watching and painting. */
  cancel(): void {
    this.frame.cancel();
    this.listenForPrint(null);
    this.observer?.disconnect();
    this.observer = null;
  }
}
