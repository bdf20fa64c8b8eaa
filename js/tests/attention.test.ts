// @vitest-environment happy-dom
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import type { AttentionTraits } from "../src/views/attention";
import { FakeModel } from "./fake-model";

const TOKENS = ["<bos>", " the", " cat", "\n", "<b>x</b>"];
const N = TOKENS.length;
const L = 2;
const H = 3;
const PER = (N * (N + 1)) / 2;

/** Every head puts all weight on the previous token (or itself at position 0); value-weighted on the first token. */
function packed(kind: "raw" | "value"): Uint8Array {
  const data = new Uint8Array(L * H * PER);
  for (let k = 0; k < L * H; k++)
    for (let d = 0; d < N; d++) data[k * PER + (d * (d + 1)) / 2 + (kind === "raw" ? Math.max(0, d - 1) : 0)] = 255;
  return data;
}

function wire(data: Uint8Array | Float32Array, shape: number[]): AttentionTraits["patterns"] {
  return { view: new DataView(data.buffer), dtype: data instanceof Uint8Array ? "uint8" : "float32", shape };
}

function state(overrides: Partial<AttentionTraits> = {}): AttentionTraits {
  const effect = new Float32Array(L * H * N);
  effect.forEach((_, i) => (effect[i] = i % N === N - 1 ? Number.NaN : (i % N) - 1.5));
  return {
    _view: "attention",
    tokens: TOKENS,
    patterns: wire(packed("raw"), [L, H, PER]),
    causal: true,
    value_patterns: wire(packed("value"), [L, H, PER]),
    value_norms: wire(new Float32Array(L * H * N).fill(2), [L, H, N]),
    logit_effect: wire(effect, [L, H, N]),
    pattern_kind: "raw",
    show_diagonals: false,
    diagonals: [{ offset: 1, label: "previous token" }],
    selected_layer: 0,
    selected_head: 0,
    selected_dest: -1,
    selected_src: -1,
    ...overrides,
  };
}

/** A model that records custom messages the view sends and can deliver messages from the kernel. */
class StreamModel extends FakeModel<AttentionTraits> {
  sent: unknown[] = [];
  override send(content?: unknown): void {
    this.sent.push(content);
  }
  custom(content: unknown, buffers: DataView[]): void {
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

function mount(s: AttentionTraits = state()): { m: StreamModel; el: HTMLElement } {
  const m = new StreamModel(s);
  const el = document.createElement("div");
  document.body.append(el);
  cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el };
}

const tokenEl = (el: HTMLElement, i: number) => el.querySelector<HTMLElement>(`[data-cw-token="${i}"]`) as HTMLElement;
const status = (el: HTMLElement) => el.querySelector("[data-cw-status]")?.textContent ?? "";

describe("attention view", () => {
  it("draws a thumbnail per head, a large pattern and the tokens as text", () => {
    const { el } = mount();
    expect(el.dataset.cwView).toBe("attention");
    expect(el.querySelectorAll("[data-cw-head]").length).toBe(6);
    expect(el.querySelector('[data-cw-head="1.2"]')).not.toBeNull();
    expect(el.querySelectorAll(".cw-main canvas").length).toBe(1);
    const tokens = [...el.querySelectorAll("[data-cw-token]")].map((t) => t.textContent);
    expect(tokens).toEqual(["<bos>", "·the", "·cat", "⏎", "<b>x</b>"]);
    expect(el.querySelector("b")).toBeNull();
    expect(el.querySelector(".cw-thumb.cw-selected")?.getAttribute("data-cw-head")).toBe("0.0");
    expect(status(el)).toMatch(/Layer 0, head 0 \(raw pattern\) · no token selected/);
  });

  it("clicking a thumbnail selects its layer and head in the kernel", () => {
    const { m, el } = mount();
    (el.querySelector('[data-cw-head="1.1"]') as HTMLElement).click();
    expect(m.saves).toEqual([{ selected_layer: 1, selected_head: 1 }]);
  });

  it("clicking a token selects it as destination; clicking again clears", () => {
    const { m, el } = mount();
    tokenEl(el, 2).click();
    expect(m.get("selected_dest")).toBe(2);
    tokenEl(el, 2).click();
    expect(m.saves).toEqual([{ selected_dest: 2 }, { selected_dest: -1 }]);
  });

  it("in source mode, clicking a token selects it as source", () => {
    const { m, el } = mount();
    (el.querySelector('button[data-value="src"]') as HTMLElement).click();
    tokenEl(el, 1).click();
    expect(m.saves).toEqual([{ selected_src: 1 }]);
  });

  it("redraws when the kernel changes the selection, and says it in words", async () => {
    const { m, el } = mount();
    m.fromKernel({ selected_layer: 1, selected_head: 2, selected_dest: 3 });
    await nextFrame();
    expect(el.querySelector(".cw-thumb.cw-selected")?.getAttribute("data-cw-head")).toBe("1.2");
    expect(tokenEl(el, 3).classList.contains("cw-dest")).toBe(true);
    // destination 3 attends to token 2 only: that token is shaded, the others are not
    expect(tokenEl(el, 2).style.backgroundColor).not.toBe("");
    expect(tokenEl(el, 1).style.backgroundColor).toBe("");
    expect(status(el)).toMatch(/Layer 1, head 2 .* destination 3 “⏎” attends most to 2 “·cat” \(1\.000\)/);
    expect(status(el)).toMatch(/logit effect on next token “<b>x<\/b>”: \+1\.50/);
  });

  it("hovering a destination shades its sources; hovering as source shades its destinations", async () => {
    const { el } = mount();
    tokenEl(el, 4).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(tokenEl(el, 3).style.backgroundColor).not.toBe("");
    expect(tokenEl(el, 2).style.backgroundColor).toBe("");
    expect(tokenEl(el, 4).classList.contains("cw-hovered")).toBe(true);
    (el.querySelector('button[data-value="src"]') as HTMLElement).click();
    tokenEl(el, 1).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    // source 1 is attended by destination 2 only
    expect(tokenEl(el, 2).style.backgroundColor).not.toBe("");
    expect(tokenEl(el, 3).style.backgroundColor).toBe("");
    tokenEl(el, 1).parentElement?.dispatchEvent(new MouseEvent("mouseleave"));
    await nextFrame();
    expect(tokenEl(el, 2).style.backgroundColor).toBe("");
  });

  it("lists where the selected destination attends, as text, and hides the list with no destination", async () => {
    const { m, el } = mount();
    const box = el.querySelector(".cw-top-sources") as HTMLElement;
    expect(box.hidden).toBe(true);
    m.fromKernel({ selected_layer: 1, selected_head: 2, selected_dest: 4 });
    await nextFrame();
    expect(box.hidden).toBe(false);
    // every head puts all weight on the previous token: destination 4 on source 3, the newline
    const rows = [...box.querySelectorAll<HTMLElement>(".cw-top-row")];
    expect(rows.map((r) => r.dataset.cwSource)).toEqual(["3"]);
    expect(rows[0]?.textContent).toBe("1.000" + "3 “⏎”"); // weight, bar, source
    expect(box.querySelector(".cw-top-title")?.textContent).toBe("Where destination 4 “<b>x</b>” attends (L1H2, strongest 1 sources)");
    expect(box.querySelector("b")).toBeNull(); // the token is text
    m.fromKernel({ selected_dest: -1 });
    await nextFrame();
    expect(box.hidden).toBe(true);
  });

  it("switches to value-weighted patterns through the trait", async () => {
    const { m, el } = mount();
    (el.querySelector('button[data-value="value"]') as HTMLElement).click();
    expect(m.saves).toEqual([{ pattern_kind: "value" }]);
    m.fromKernel({ selected_dest: 3 });
    await nextFrame();
    expect(status(el)).toMatch(/value-weighted pattern.*attends most to 0 “<bos>”/);
    expect(el.querySelector(".cw-legend")?.textContent).toMatch(/value-weighted/);
  });

  it("shades tokens by the logit effect, on a signed scale", async () => {
    const { el } = mount();
    (el.querySelector('button[data-value="strip"]') as HTMLElement).click();
    await nextFrame();
    // effects are -1.5, -0.5, 0.5, 1.5, NaN: the last token has no next token
    expect(tokenEl(el, 0).style.backgroundColor).not.toBe("");
    expect(tokenEl(el, 0).style.backgroundColor).not.toBe(tokenEl(el, 3).style.backgroundColor);
    expect(tokenEl(el, 4).style.backgroundColor).toBe("");
    expect(el.querySelector(".cw-legend")?.textContent).toMatch(/logit effect.*−1\.50.*\+1\.50/);
  });

  it("without value patterns or logit effects the controls are disabled and nothing fails", () => {
    const { el } = mount(state({ value_patterns: null, value_norms: null, logit_effect: null }));
    expect((el.querySelector('button[data-value="value"]') as HTMLButtonElement).disabled).toBe(true);
    expect((el.querySelector('button[data-value="strip"]') as HTMLButtonElement).disabled).toBe(true);
  });

  it("toggles the offset diagonals through the trait and lists them in the legend", async () => {
    const { m, el } = mount();
    const box = el.querySelector('input[data-cw-control="diagonals"]') as HTMLInputElement;
    box.checked = true;
    box.dispatchEvent(new Event("change"));
    expect(m.saves).toEqual([{ show_diagonals: true }]);
    await nextFrame();
    expect(el.querySelector(".cw-legend")?.textContent).toMatch(/previous token \(dest − src = 1\)/);
  });

  it("ignores an out-of-range selection instead of failing", async () => {
    const { m, el } = mount();
    m.fromKernel({ selected_head: 99 });
    await nextFrame();
    expect(el.querySelector(".cw-thumb.cw-selected")?.getAttribute("data-cw-head")).toBe("0.0");
  });

  it("shows a plain error for data that does not match the tokens", () => {
    const { el } = mount(state({ tokens: ["a"] }));
    expect(el.querySelector(".cw-error")?.textContent).toMatch(/do not match 1 tokens/);
  });

  it("asks for streamed heads, fills them in as they arrive, then takes the complete traits", async () => {
    const placeholder = wire(new Uint8Array(0), [L, H, 0]);
    const { m, el } = mount(state({ patterns: placeholder, value_patterns: placeholder, selected_layer: 1, selected_head: 2 }));
    expect(m.sent).toEqual([{ type: "want_heads" }]);
    expect(el.querySelectorAll(".cw-thumb.cw-pending").length).toBe(6);
    expect(status(el)).toMatch(/loading · heads loaded 0 of 6/);
    const raw = packed("raw");
    const value = packed("value");
    const head = (k: number, a: Uint8Array) => new DataView(a.buffer, k * PER, PER);
    m.custom({ type: "heads", heads: [[1, 2]], value: true }, [head(5, raw), head(5, value)]);
    await nextFrame();
    await nextFrame();
    expect(el.querySelector('[data-cw-head="1.2"]')?.classList.contains("cw-pending")).toBe(false);
    expect(el.querySelectorAll(".cw-thumb.cw-pending").length).toBe(5);
    m.fromKernel({ selected_dest: 3 });
    await nextFrame();
    expect(status(el)).toMatch(/attends most to 2 “·cat”.*heads loaded 1 of 6/);
    // a malformed message is ignored
    m.custom({ type: "heads", heads: [[0, 0]], value: true }, [new DataView(new ArrayBuffer(3))]);
    m.fromKernel({ patterns: wire(raw, [L, H, PER]), value_patterns: wire(value, [L, H, PER]) });
    await nextFrame();
    await nextFrame();
    expect(el.querySelectorAll(".cw-thumb.cw-pending").length).toBe(0);
    expect(status(el)).not.toMatch(/heads loaded/);
  });

  it("cleans up: removes its listeners and elements", () => {
    const { m, el } = mount();
    expect(m.listenerCount()).toBeGreaterThan(0);
    if (typeof cleanup === "function") cleanup();
    cleanup = undefined;
    expect(m.listenerCount()).toBe(0);
    expect(el.childElementCount).toBe(0);
  });

  it("says so for an unknown view", () => {
    const m = new FakeModel({ _view: "nope" });
    const el = document.createElement("div");
    widget.render({ model: m.asModel(), el } as unknown as RenderProps);
    expect(el.textContent).toMatch(/unknown view "nope"/);
  });
});
