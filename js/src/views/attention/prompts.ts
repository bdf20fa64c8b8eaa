// The prompt picker of a batch: a selector (with previous / next) and the
// selected head drawn small for every prompt, to compare one head across
// examples; clicking a small pattern shows that prompt. Token text is set as
// text only. The small patterns are painted when on screen (./visible.ts).

import type { ColourScale } from "../../lib/attentionui";
import { el, listen } from "../../lib/dom";
import { noExport } from "../../lib/export";
import { blit, cellImage, sizeCanvas } from "../../lib/heatmap";
import { ATTENTION } from "../../lib/shading";
import { headName } from "../../lib/svg";
import { fullView } from "../../lib/viewport";
import { EMPTY_RGBA } from "./layout";
import type { PatternSource } from "./source";
import { LazyPainter } from "./visible";

/** Side of a prompt's small pattern (CSS px). */
const MINI_PX = 44;

/** Characters of a prompt shown in the selector. */
const PREVIEW_CHARS = 48;

/** A prompt as the selector names it: its number and its first tokens joined (as text). */
export function promptLabel(tokens: readonly string[], index: number): string {
  const text = tokens.join("").replace(/\s+/g, " ").trim();
  const cut = text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS - 1)}…` : text;
  return `${index + 1}: ${cut} (${tokens.length} tokens)`;
}

export interface PromptHost {
  /** Show prompt `p` (the view sets the traits). */
  choose(p: number): void;
  /** Prompt `p`'s pattern as shown (raw or value-weighted), or null. */
  source(p: number): PatternSource | null;
  /** The selected head. */
  head(): { layer: number; head: number };
  scale(): ColourScale;
}

export class PromptPicker {
  readonly element: HTMLElement;
  private readonly select: HTMLSelectElement;
  private readonly previous: HTMLButtonElement;
  private readonly next: HTMLButtonElement;
  private readonly caption: HTMLElement;
  private readonly strip: HTMLElement;
  private buttons: HTMLButtonElement[] = [];
  private count = 0;
  private index = 0;
  private key = "";
  private readonly painter = new LazyPainter((i) => this.draw(i));
  private readonly cleanups: (() => void)[];
  private readonly scratch: HTMLCanvasElement;

  constructor(
    private readonly doc: Document,
    private readonly host: PromptHost,
  ) {
    this.scratch = doc.createElement("canvas");
    this.element = noExport(el(doc, "div", "cw-prompts"));
    this.element.dataset.cwPrompts = "";
    const row = el(doc, "div", "cw-prompt-row");
    const label = el(doc, "label", "cw-prompt-label", "Prompt ");
    this.select = el(doc, "select");
    this.select.dataset.cwControl = "prompt";
    label.append(this.select);
    this.previous = el(doc, "button", "cw-button cw-small", "‹");
    this.next = el(doc, "button", "cw-button cw-small", "›");
    this.previous.type = this.next.type = "button";
    this.previous.title = "Previous prompt";
    this.next.title = "Next prompt";
    this.caption = el(doc, "span", "cw-prompt-caption");
    row.append(label, this.previous, this.next, this.caption);
    this.strip = el(doc, "div", "cw-prompt-strip");
    this.strip.setAttribute("role", "group");
    this.element.append(row, this.strip);
    this.cleanups = [
      listen(this.select, "change", () => host.choose(Number(this.select.value))),
      listen(this.previous, "click", () => host.choose(Math.max(0, this.index - 1))),
      listen(this.next, "click", () => host.choose(Math.min(this.count - 1, this.index + 1))),
      listen(this.strip, "click", (event) => {
        const button = (event.target as Element | null)?.closest?.("[data-cw-prompt]");
        if (button instanceof HTMLElement) host.choose(Number(button.dataset.cwPrompt));
      }),
    ];
  }

  /** Show the picker for `prompts` (hidden when there are none), prompt `index` selected. */
  load(prompts: readonly (readonly string[])[], index: number): void {
    this.element.hidden = prompts.length === 0;
    const labels = prompts.map(promptLabel);
    const key = labels.join("\n");
    if (key !== this.key) {
      this.key = key;
      this.count = prompts.length;
      this.select.replaceChildren(
        ...labels.map((text, i) => {
          const option = el(this.doc, "option", undefined, text);
          option.value = String(i);
          return option;
        }),
      );
      this.buttons = labels.map((text, i) => {
        const button = el(this.doc, "button", "cw-prompt-mini");
        button.type = "button";
        button.dataset.cwPrompt = String(i);
        button.title = text;
        button.setAttribute("aria-label", `Prompt ${text}`);
        const canvas = el(this.doc, "canvas");
        canvas.width = canvas.height = 0;
        canvas.style.width = canvas.style.height = `${MINI_PX}px`;
        button.append(canvas, el(this.doc, "span", undefined, String(i + 1)));
        return button;
      });
      this.strip.replaceChildren(...this.buttons);
      this.painter.observe(this.buttons, index);
    }
    this.show(index);
  }

  /** Mark prompt `index` as shown. */
  show(index: number): void {
    this.index = index;
    this.select.value = String(index);
    this.previous.disabled = index <= 0;
    this.next.disabled = index >= this.count - 1;
    this.buttons.forEach((b, i) => b.classList.toggle("cw-selected", i === index));
  }

  /** Redraw the small patterns (another head, kind or colour scale). */
  redraw(): void {
    const { layer, head } = this.host.head();
    this.caption.textContent = `${headName(layer, head)} in every prompt (click one to show it):`;
    this.painter.invalidate(this.index);
  }

  private draw(i: number): void {
    const canvas = this.buttons[i]?.querySelector("canvas");
    const p = this.host.source(i);
    if (!canvas || p === null) return;
    const ctx = sizeCanvas(canvas, MINI_PX, MINI_PX);
    if (ctx === null) return;
    ctx.fillStyle = "#f4f4f4";
    ctx.fillRect(0, 0, MINI_PX, MINI_PX);
    const { layer, head } = this.host.head();
    if (!p.ready(layer, head)) return;
    const dpr = globalThis.devicePixelRatio || 1;
    const image = cellImage(this.doc, p.cells(layer, head, fullView(p.nTokens), MINI_PX * dpr, this.host.scale()), ATTENTION, EMPTY_RGBA, this.scratch);
    if (image !== null) blit(ctx, image, 0, 0, MINI_PX, MINI_PX);
  }

  cleanup(): void {
    this.painter.cancel();
    for (const c of this.cleanups) c();
    this.element.remove();
  }
}
