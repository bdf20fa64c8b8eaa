// @vitest-environment happy-dom
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import { headSize, promptPatterns, rowWeights, toPatterns, weightAt } from "../src/lib/patterns";
import type { AttentionTraits } from "../src/views/attention";
import { promptLabel } from "../src/views/attention/prompts";
import { promptPositions } from "../src/views/attention/source";
import { EAGER_MAX, LazyPainter } from "../src/views/attention/visible";
import { FakeModel } from "./fake-model";

const L = 2;
const H = 3;
const PROMPTS = [["<bos>", " a", " b", " c", " d"], ["<bos>", "<i>x</i>", " y"], ["<bos>", " p", " q", " r"]];
const WIDTH = 5;

/** Prompt p, head k: every row puts all its weight on source (p + k) mod (dest + 1), so each prompt and head differ. */
function target(p: number, k: number, dest: number): number {
  return (p + k) % (dest + 1);
}

/** One prompt's own patterns, packed alone ([L, H, n(n+1)/2] or [L, H, n, n]). */
function alone(p: number, causal: boolean): Uint8Array {
  const n = PROMPTS[p]?.length ?? 0;
  const per = headSize(n, causal);
  const out = new Uint8Array(L * H * per);
  for (let k = 0; k < L * H; k++)
    for (let d = 0; d < n; d++) out[k * per + (causal ? (d * (d + 1)) / 2 : d * n) + target(p, k, d)] = 255;
  return out;
}

/** The batch as the kernel sends it: prompts first, each padded on the right to WIDTH tokens. */
function padded(causal: boolean): Uint8Array {
  const per = headSize(WIDTH, causal);
  const out = new Uint8Array(PROMPTS.length * L * H * per);
  PROMPTS.forEach((tokens, p) => {
    const n = tokens.length;
    for (let k = 0; k < L * H; k++)
      for (let d = 0; d < n; d++) out[(p * L * H + k) * per + (causal ? (d * (d + 1)) / 2 : d * WIDTH) + target(p, k, d)] = 255;
  });
  return out;
}

function wire(data: Uint8Array | Float32Array, shape: number[]): AttentionTraits["patterns"] {
  return { view: new DataView(data.buffer), dtype: data instanceof Uint8Array ? "uint8" : "float32", shape };
}

describe("a prompt of a padded batch", () => {
  for (const causal of [true, false]) {
    it(`reads in place exactly what the prompt alone holds (${causal ? "causal" : "full"})`, () => {
      const shape = causal ? [3, L, H, headSize(WIDTH, true)] : [3, L, H, WIDTH, WIDTH];
      const batch = { data: padded(causal), shape, dtype: "uint8" as const };
      for (let p = 0; p < PROMPTS.length; p++) {
        const n = PROMPTS[p]?.length ?? 0;
        const mine = promptPatterns(batch, p, n, WIDTH, causal);
        const single = causal ? [L, H, headSize(n, true)] : [L, H, n, n];
        const ref = toPatterns({ data: alone(p, causal), shape: single, dtype: "uint8" }, n, causal);
        expect(mine.data.buffer).toBe(batch.data.buffer); // (no copy)
        for (let layer = 0; layer < L; layer++)
          for (let head = 0; head < H; head++)
            for (let d = 0; d < n; d++) {
              expect(Array.from(rowWeights(mine, layer, head, d))).toEqual(Array.from(rowWeights(ref, layer, head, d)));
              for (let s = 0; s < n; s++) expect(weightAt(mine, layer, head, d, s)).toBe(weightAt(ref, layer, head, d, s));
            }
      }
    });
  }

  it("refuses a prompt or a shape that does not fit", () => {
    const batch = { data: padded(true), shape: [3, L, H, headSize(WIDTH, true)], dtype: "uint8" as const };
    expect(() => promptPatterns(batch, 3, 2, WIDTH, true)).toThrow(/no prompt 3/);
    expect(() => promptPatterns(batch, 0, 6, WIDTH, true)).toThrow(/padded to 5/);
    expect(() => promptPatterns(batch, 0, 5, 4, true)).toThrow(/shape/);
  });

  it("takes its per-position values out of [P, L, H, width]", () => {
    const values = new Float32Array(3 * L * H * WIDTH).map((_, i) => i);
    const mine = promptPositions(wire(values, [3, L, H, WIDTH]), 1, L, H, 3, WIDTH);
    expect(mine?.length).toBe(L * H * 3);
    expect(Array.from(mine?.subarray(3, 6) ?? [])).toEqual([(1 * L * H + 1) * WIDTH, (1 * L * H + 1) * WIDTH + 1, (1 * L * H + 1) * WIDTH + 2]);
    expect(promptPositions(wire(values, [3, L, H, WIDTH]), 3, L, H, 3, WIDTH)).toBeNull();
  });

  it("is named by its number and first tokens, as text", () => {
    expect(promptLabel(["<bos>", "<i>x</i>", " y"], 1)).toBe("2: <bos><i>x</i> y (3 tokens)");
    expect(promptLabel(Array(60).fill(" w"), 0)).toMatch(/^1: w w .*…\s\(60 tokens\)$/);
  });
});

/** An IntersectionObserver whose visible set the test decides. */
class FakeObserver {
  static all: FakeObserver[] = [];
  targets: Element[] = [];
  constructor(private readonly callback: (entries: { target: Element; isIntersecting: boolean }[]) => void) {
    FakeObserver.all.push(this);
  }
  observe(target: Element): void {
    this.targets.push(target);
  }
  disconnect(): void {
    this.targets = [];
  }
  show(visible: (i: number) => boolean): void {
    this.callback(this.targets.map((target, i) => ({ target, isIntersecting: visible(i) })));
  }
}

const nextFrame = (): Promise<void> => new Promise((r) => setTimeout(r, 40));

describe("painting only what is on screen", () => {
  it("paints visible items, the rest when scrolled to, and repaints only visible ones after a change", async () => {
    (window as unknown as { IntersectionObserver: unknown }).IntersectionObserver = FakeObserver;
    FakeObserver.all = [];
    const painted: number[] = [];
    const painter = new LazyPainter((i) => painted.push(i));
    const items = Array.from({ length: 1024 }, () => document.createElement("button"));
    document.body.append(...items);
    painter.observe(items, 5);
    await nextFrame();
    expect(painted).toEqual([]); // nothing is known to be visible yet
    const observer = FakeObserver.all.at(-1) as FakeObserver;
    observer.show((i) => i < 40);
    for (let k = 0; k < 5 && painted.length < 40; k++) await nextFrame();
    expect(painted.sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i));
    expect(items.filter((b) => b.dataset.cwPainted === "1").length).toBe(40);
    // scrolling: the next ones come into view and are painted; the first leave
    painted.length = 0;
    observer.show((i) => i >= 40 && i < 80);
    for (let k = 0; k < 5 && painted.length < 40; k++) await nextFrame();
    expect(painted.sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => 40 + i));
    // a change (another colour scale): only what is in view is repainted now, the selected one first
    painted.length = 0;
    painter.invalidate(60);
    for (let k = 0; k < 5 && painted.length < 40; k++) await nextFrame();
    expect(painted[0]).toBe(60);
    expect(painted.length).toBe(40);
    expect(painter.stats.painted).toBe(80);
    painter.cancel();
    delete (window as unknown as { IntersectionObserver?: unknown }).IntersectionObserver;
  });
});

let cleanup: (() => void) | void = undefined;
afterEach(() => {
  if (typeof cleanup === "function") cleanup();
  cleanup = undefined;
  document.body.replaceChildren();
});

function batchState(overrides: Partial<AttentionTraits> = {}): AttentionTraits {
  return {
    _view: "attention",
    prompts: PROMPTS,
    tokens: PROMPTS[0] as string[],
    patterns: wire(padded(true), [3, L, H, headSize(WIDTH, true)]),
    causal: true,
    value_patterns: null,
    value_norms: null,
    logit_effect: wire(new Float32Array(3 * L * H * WIDTH).fill(0.5), [3, L, H, WIDTH]),
    pattern_kind: "raw",
    show_diagonals: false,
    diagonals: [],
    selected_layer: 0,
    selected_head: 0,
    selected_prompt: 0,
    selected_dest: -1,
    selected_src: -1,
    ...overrides,
  };
}

function mount(s: AttentionTraits): { m: FakeModel<AttentionTraits>; el: HTMLElement } {
  const m = new FakeModel(s);
  const el = document.createElement("div");
  document.body.append(el);
  cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el };
}

describe("attention view of a batch", () => {
  it("shows the selected prompt's tokens and a picker whose labels are text", async () => {
    const { el } = mount(batchState({ selected_prompt: 1 }));
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-token]").length).toBe(3);
    expect(el.querySelector('[data-cw-token="1"]')?.textContent).toBe("<i>x</i>");
    const options = Array.from(el.querySelectorAll<HTMLOptionElement>('select[data-cw-control="prompt"] option'));
    expect(options.map((o) => o.textContent)).toEqual(PROMPTS.map((t, i) => promptLabel(t, i)));
    expect(Array.from(el.querySelectorAll("i")).some((i) => i.textContent === "x")).toBe(false); // token text never becomes markup
    expect((el.querySelector('select[data-cw-control="prompt"]') as HTMLSelectElement).value).toBe("1");
    expect(el.querySelectorAll("[data-cw-prompt]").length).toBe(3);
    expect(el.querySelector(".cw-subtitle")?.textContent ?? el.textContent).toMatch(/prompt 2 of 3 · 3 tokens · 2 × 3 heads/);
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^Prompt 2 of 3 · /);
  });

  it("chooses a prompt in one update, clearing positions past its end", async () => {
    const { m, el } = mount(batchState({ selected_dest: 4, selected_src: 1 }));
    await nextFrame();
    (el.querySelector('[data-cw-prompt="1"]') as HTMLElement).click();
    expect(m.saves.at(-1)).toEqual({ selected_prompt: 1, selected_dest: -1 });
    expect(m.get("selected_src")).toBe(1);
    const select = el.querySelector('select[data-cw-control="prompt"]') as HTMLSelectElement;
    select.value = "2";
    select.dispatchEvent(new Event("change"));
    expect(m.get("selected_prompt")).toBe(2);
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-token]").length).toBe(4);
    // from the kernel (or a linked view) too
    m.fromKernel({ selected_prompt: 0 });
    await nextFrame();
    expect(el.querySelectorAll("[data-cw-token]").length).toBe(5);
    expect((el.querySelector('[data-cw-prompt="0"]') as HTMLElement).classList.contains("cw-selected")).toBe(true);
  });

  it("hides the picker for one text", async () => {
    const { el } = mount(batchState({ prompts: [], tokens: PROMPTS[0] as string[], patterns: wire(alone(0, true), [L, H, headSize(5, true)]), logit_effect: null }));
    await nextFrame();
    expect((el.querySelector("[data-cw-prompts]") as HTMLElement).hidden).toBe(true);
  });
});

describe("a small grid is painted whole without being scrolled through", () => {
  it("paints the items off screen after the visible ones, up to EAGER_MAX items, and everything before printing", async () => {
    (window as unknown as { IntersectionObserver: unknown }).IntersectionObserver = FakeObserver;
    FakeObserver.all = [];
    const painted: number[] = [];
    const painter = new LazyPainter((i) => painted.push(i));
    const items = Array.from({ length: 24 }, () => document.createElement("button"));
    document.body.append(...items);
    painter.observe(items);
    (FakeObserver.all.at(-1) as FakeObserver).show((i) => i >= 20); // the last four on screen
    for (let k = 0; k < 10 && painted.length < 24; k++) await nextFrame();
    expect(painted.slice(0, 4).sort((a, b) => a - b)).toEqual([20, 21, 22, 23]); // the visible ones first
    expect([...painted].sort((a, b) => a - b)).toEqual(Array.from({ length: 24 }, (_, i) => i));
    expect(items.every((b) => b.dataset.cwPainted === "1")).toBe(true);
    painter.cancel();

    const many: number[] = [];
    const big = new LazyPainter((i) => many.push(i));
    const buttons = Array.from({ length: EAGER_MAX + 1 }, () => document.createElement("button"));
    big.observe(buttons);
    (FakeObserver.all.at(-1) as FakeObserver).show((i) => i < 3);
    for (let k = 0; k < 5; k++) await nextFrame();
    expect(many.sort((a, b) => a - b)).toEqual([0, 1, 2]); // a large grid: only what is seen
    window.dispatchEvent(new Event("beforeprint"));
    expect(many.length).toBe(EAGER_MAX + 1); // a printout shows every item
    big.cancel();
  });
});
