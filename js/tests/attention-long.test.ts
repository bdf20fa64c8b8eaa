// @vitest-environment happy-dom
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import type { AttentionTraits } from "../src/views/attention";
import { LongSource } from "../src/views/attention/long";
import { FakeModel } from "./fake-model";

const N = 5000; // over the token strip's limit: the strip is virtualised
const L = 1;
const H = 2;
const BLOCK = 32; // overview 157 × 157 blocks
const G = Math.ceil(N / BLOCK);

/** float16 bits of x (positive normals only, enough here). */
function half(x: number): number {
  if (x === 0) return 0;
  const e = Math.floor(Math.log2(x));
  return ((e + 15) << 10) | Math.round((x / 2 ** e - 1) * 1024);
}

function overviewBytes(value: number): Uint16Array {
  const bits = new Uint16Array(2 * G * G);
  for (let r = 0; r < G; r++) for (let c = 0; c <= r; c++) bits[r * G + c] = half(value);
  return bits;
}

function wire(data: ArrayBufferView, dtype: string, shape: number[]): AttentionTraits["patterns"] {
  return { view: new DataView(data.buffer), dtype, shape } as AttentionTraits["patterns"];
}

function state(overrides: Partial<AttentionTraits> = {}): AttentionTraits {
  return {
    _view: "attention",
    tokens: Array.from({ length: N }, (_, i) => `t${i}`),
    patterns: wire(new Uint8Array(0), "uint8", [L, H, 0]),
    causal: true,
    value_patterns: null,
    value_norms: null,
    logit_effect: null,
    pattern_kind: "raw",
    show_diagonals: false,
    diagonals: [],
    selected_layer: 0,
    selected_head: 1,
    selected_dest: -1,
    selected_src: -1,
    tile_block: BLOCK,
    tile_size: 64,
    overview: wire(new Uint16Array(0), "float16", [L, H, 2, 0, 0]),
    top_sources: null,
    top_weights: null,
    ...overrides,
  };
}

class KernelModel extends FakeModel<AttentionTraits> {
  sent: Record<string, unknown>[] = [];
  override send(content?: unknown): void {
    this.sent.push(content as Record<string, unknown>);
  }
  custom(content: unknown, buffers: ArrayBuffer[]): void {
    const handlers = (this as unknown as { handlers: Map<string, Set<(...a: unknown[]) => void>> }).handlers;
    for (const h of handlers.get("msg:custom") ?? []) h(content, buffers);
  }
}

const nextFrame = (): Promise<void> => new Promise((r) => setTimeout(r, 40));
let cleanup: (() => void) | void = undefined;
afterEach(() => {
  if (typeof cleanup === "function") cleanup();
  cleanup = undefined;
  document.body.replaceChildren();
});

function mount(s: AttentionTraits = state()): { m: KernelModel; el: HTMLElement } {
  const m = new KernelModel(s);
  const el = document.createElement("div");
  document.body.append(el);
  cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el };
}

/** Zoom in with the keyboard (one frame a step), then select (100, 90) from the kernel: the view follows it. */
async function zoomTo(m: KernelModel, el: HTMLElement): Promise<void> {
  const canvas = el.querySelector(".cw-main canvas") as HTMLCanvasElement;
  for (let i = 0; i < 12; i++) {
    canvas.dispatchEvent(new KeyboardEvent("keydown", { key: "+" }));
    await nextFrame();
  }
  m.fromKernel({ selected_dest: 100, selected_src: 90 });
  await nextFrame();
}

const status = (el: HTMLElement) => el.querySelector("[data-cw-status]")?.textContent ?? "";

describe("attention view over a long context", () => {
  it("asks for the heads' overviews, shows them as they come, and keeps few tokens in the DOM", async () => {
    const { m, el } = mount();
    expect(m.sent).toContainEqual({ type: "want_heads" });
    expect(status(el)).toMatch(/loading · heads loaded 0 of 2/);
    expect(el.querySelectorAll("[data-cw-token]").length).toBeLessThanOrEqual(1024);
    m.custom({ type: "overview", heads: [[0, 1]] }, [overviewBytes(0.5).buffer as ArrayBuffer]);
    await nextFrame();
    expect(status(el)).toMatch(/heads loaded 1 of 2/);
    expect(el.dataset.cwPainted).toBeDefined();
  });

  it("draws a head from its first band of rows, stays pending until its last band, and ignores bands that do not fit", async () => {
    const { m, el } = mount();
    const whole = overviewBytes(0.5);
    const band = (i0: number, i1: number): ArrayBuffer => {
      const out = new Uint16Array(2 * (i1 - i0) * G);
      out.set(whole.subarray(i0 * G, i1 * G)); // max rows; the mean rows follow (zeros here)
      return out.buffer as ArrayBuffer;
    };
    m.custom({ type: "overview", heads: [[0, 1]], rows: [0, 40], done: false }, [band(0, 40)]);
    await nextFrame();
    expect(el.dataset.cwPainted).toBeDefined();
    expect(el.dataset.cwPaintedWhole).toBeUndefined();
    expect(status(el)).toMatch(/rows still loading · .*heads loaded 0 of 2/);
    const thumb = el.querySelector('[data-cw-head="0.1"]') as HTMLElement;
    expect(thumb.classList.contains("cw-pending")).toBe(true);
    // a band of the wrong size, rows out of range, a head that does not exist: ignored
    m.custom({ type: "overview", heads: [[0, 1]], rows: [40, 80], done: true }, [band(40, 79)]);
    m.custom({ type: "overview", heads: [[0, 1]], rows: [150, G + 1], done: true }, [band(150, G + 1)]);
    m.custom({ type: "overview", heads: [[0, 5]], rows: [0, 1], done: true }, [band(0, 1)]);
    await nextFrame();
    expect(el.dataset.cwPaintedWhole).toBeUndefined();
    m.custom({ type: "overview", heads: [[0, 1]], rows: [40, G], done: true }, [band(40, G)]);
    await nextFrame();
    expect(el.dataset.cwPaintedWhole).toBeDefined();
    expect(thumb.classList.contains("cw-pending")).toBe(false);
    expect(status(el)).toMatch(/heads loaded 1 of 2/);
    expect(status(el)).not.toMatch(/rows still loading/);
  });

  it("zooming asks the kernel for tiles, cancels those scrolled away, and shows exact weights when they arrive", async () => {
    const { m, el } = mount();
    m.custom({ type: "overview", heads: [[0, 1]] }, [overviewBytes(0.5).buffer as ArrayBuffer]);
    await zoomTo(m, el);
    const tiles = m.sent.filter((s) => s.type === "tile");
    expect(tiles.length).toBeGreaterThan(0);
    expect(tiles.every((t) => t.layer === 0 && t.head === 1)).toBe(true);
    const finest = tiles.filter((t) => t.level === 0);
    expect(finest.length).toBeGreaterThan(0);
    expect(m.sent.some((s) => s.type === "cancel")).toBe(true); // coarser levels passed by on the way in
    // the kernel answers the tile holding (100, 90) with exact weights
    const t = finest.find((x) => x.row === 1 && x.col === 1) ?? finest[0];
    const max = new Float32Array(64 * 64).fill(0.125);
    m.custom({ ...t, rows: 64, cols: 64 }, [max.buffer, max.slice().buffer]);
    await nextFrame();
    expect(status(el)).toMatch(/destination 100 “t100” → source 90 “t90”: 0\.125/);
    // the kernel commits the complete overview trait: the tiles received stay
    const all = new Uint16Array(L * H * 2 * G * G);
    all.set(overviewBytes(0.5), 2 * G * G);
    m.fromKernel({ overview: wire(all, "float16", [L, H, 2, G, G]) });
    await nextFrame();
    expect(Number(el.dataset.cwTilesCached)).toBeGreaterThan(0);
    expect(status(el)).toMatch(/→ source 90 “t90”: 0\.125/);
  });

  it("with value norms, draws the value-weighted overview from the same bands and asks for value tiles", async () => {
    const per = (v: number) => wire(new Float32Array(L * H * N).fill(v), "float32", [L, H, N]);
    const { m, el } = mount(
      state({ overview: wire(new Uint16Array(0), "float16", [L, H, 4, 0, 0]), value_norms: per(1), logit_effect: per(0.5) }),
    );
    const valueButton = el.querySelector('button[data-value="value"]') as HTMLButtonElement;
    const logitButton = el.querySelector('button[data-value="strip"]') as HTMLButtonElement;
    // one head's whole overview: raw max, mean, then the value-weighted max, mean
    const bits = new Uint16Array(4 * G * G);
    bits.set(overviewBytes(0.5).subarray(0, G * G), 0);
    bits.set(overviewBytes(0.25).subarray(0, G * G), 2 * G * G);
    m.custom({ type: "overview", heads: [[0, 1]] }, [bits.buffer as ArrayBuffer]);
    await nextFrame();
    expect(valueButton.disabled).toBe(false);
    expect(logitButton.disabled).toBe(false);
    const before = m.sent.length;
    m.fromKernel({ pattern_kind: "value", selected_dest: 100, selected_src: 90 });
    await nextFrame();
    // the value-weighted overview's block, and the head's logit effect at the selected destination
    expect(status(el)).toMatch(/value-weighted pattern\) · destination 100 “t100” → source 90 “t90”: ≤ 0\.250/);
    expect(status(el)).toMatch(/logit effect on next token “t101”: \+0\.50/);
    await zoomTo(m, el);
    const tiles = m.sent.slice(before).filter((s) => s.type === "tile");
    expect(tiles.length).toBeGreaterThan(0);
    expect(tiles.every((t) => t.kind === "value")).toBe(true);
    const t = tiles.filter((x) => x.level === 0).find((x) => x.row === 1 && x.col === 1);
    expect(t).toBeDefined();
    const max = new Float32Array(64 * 64).fill(0.375);
    m.custom({ ...t, rows: 64, cols: 64 }, [max.buffer, max.slice().buffer]);
    await nextFrame();
    expect(status(el)).toMatch(/→ source 90 “t90”: 0\.375/);
    // back to raw: the raw overview, and raw tiles asked for
    m.fromKernel({ pattern_kind: "raw" });
    await nextFrame();
    expect(status(el)).not.toMatch(/0\.375/);
    expect(m.sent.filter((s) => s.type === "tile" && s.kind === "raw").length).toBeGreaterThan(0);
  });

  it("shows a kernel's refusal in the status line", async () => {
    const { m, el } = mount();
    m.custom({ type: "tile_error", id: 3, message: "tile request: level 9 is out of range" }, []);
    await nextFrame();
    expect(status(el)).toMatch(/kernel: tile request: level 9 is out of range/);
  });

  it("in an exported page, asks for nothing and says that finer zoom needs a live kernel", async () => {
    const g = G;
    const overview = new Uint16Array(L * H * 2 * g * g);
    overview.set(overviewBytes(0.25), 2 * g * g);
    const k = 2;
    const sources = new Int32Array(L * H * N * k).fill(-1);
    const weights = new Uint16Array(L * H * N * k);
    const base = (0 * H + 1) * N * k;
    sources[base + 100 * k] = 90;
    weights[base + 100 * k] = half(0.75);
    const { m, el } = mount(
      state({
        __offline__: true,
        overview: wire(overview, "float16", [L, H, 2, g, g]),
        top_sources: wire(sources, "int32", [L, H, N, k]),
        top_weights: wire(weights, "float16", [L, H, N, k]),
      } as Partial<AttentionTraits>),
    );
    await zoomTo(m, el);
    expect(m.sent.filter((s) => s.type === "tile")).toEqual([]);
    expect(el.querySelector(".cw-zoom")?.textContent).toMatch(/top 2 sources at full resolution; finer zoom needs a live kernel/);
    expect(status(el)).toMatch(/→ source 90 “t90”: 0\.750/);
  });
});

describe("an exported long-context page with value norms", () => {
  it("shows the value-weighted overview and says that is all it holds at finer zoom", async () => {
    const overview = new Uint16Array(L * H * 4 * G * G);
    const head1 = 1 * 4 * G * G; // layer 0, head 1: channels raw max, raw mean, value max, value mean
    overview.set(overviewBytes(0.25).subarray(0, G * G), head1);
    overview.set(overviewBytes(0.625).subarray(0, G * G), head1 + 2 * G * G);
    const { m, el } = mount(
      state({
        __offline__: true,
        overview: wire(overview, "float16", [L, H, 4, G, G]),
        value_norms: wire(new Float32Array(L * H * N).fill(1), "float32", [L, H, N]),
        pattern_kind: "value",
      } as Partial<AttentionTraits>),
    );
    await zoomTo(m, el);
    expect(m.sent.filter((s) => s.type === "tile")).toEqual([]);
    expect(el.querySelector(".cw-zoom")?.textContent).toMatch(/exported page: the value-weighted overview only; finer zoom needs a live kernel/);
    expect(status(el)).toMatch(/value-weighted pattern\) · destination 100 “t100” → source 90 “t90”: ≤ 0\.625/);
  });
});

describe("LongSource with a value-weighted pattern", () => {
  it("reads both kinds from each band's four channels and asks for tiles of the kind it draws", () => {
    const sent: Record<string, unknown>[] = [];
    const n = 256; // blocks of 32: an 8 × 8 overview
    const shape = { nLayers: 1, nHeads: 1, nTokens: n, causal: false, block: 32, tileSize: 64 };
    const raw = new LongSource(shape, wire(new Uint16Array(0), "float16", [1, 1, 4, 0, 0]), null, null, (m) => sent.push(m), false);
    const value = raw.withKind("value");
    expect(raw.kinds).toEqual(["raw", "value"]);
    expect(value).not.toBeNull();
    // a band of the first two overview rows: [4 channels, 2 rows, 8 columns]
    const band = new Uint16Array(4 * 2 * 8);
    band.fill(half(0.5), 0, 16); // raw max
    band.fill(half(0.125), 32, 48); // value max
    expect(raw.receiveOverview({ type: "overview", heads: [[0, 0]], rows: [0, 2], done: false }, [band.buffer])).toEqual([0]);
    expect(raw.ready(0, 0) && value?.ready(0, 0)).toBe(true);
    expect(raw.complete(0, 0)).toBe(false);
    expect(raw.weight(0, 0, 40, 3).value).toBe(0.5);
    expect(value?.weight(0, 0, 40, 3).value).toBe(0.125);
    expect(Number.isNaN(value?.weight(0, 0, 100, 3).value)).toBe(true); // rows still to come
    // a band sized for the raw pattern alone does not fit and is ignored
    expect(raw.receiveOverview({ type: "overview", heads: [[0, 0]], rows: [2, 3], done: false }, [new Uint16Array(2 * 8).buffer])).toEqual([]);
    value?.need(0, 0, { r0: 0, c0: 0, size: 64 }, 440);
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.every((m) => m.type === "tile" && m.kind === "value")).toBe(true);
    // without value norms (two channels) there is no value-weighted source
    const plain = new LongSource(shape, wire(new Uint16Array(0), "float16", [1, 1, 2, 0, 0]), null, null, () => {}, false);
    expect(plain.withKind("value")).toBeNull();
  });
});
