// @vitest-environment happy-dom
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import type { AttentionTraits } from "../src/views/attention";
import { FakeModel } from "./fake-model";

const TOKENS = ["<bos>", " the", " cat", "\n", "<b>x</b>"];

function state(): AttentionTraits {
  const n = TOKENS.length;
  const L = 2;
  const H = 3;
  const per = (n * (n + 1)) / 2;
  const data = new Uint8Array(L * H * per);
  // head [l, h]: everything on the previous token (or itself at position 0)
  for (let k = 0; k < L * H; k++)
    for (let d = 0; d < n; d++) data[k * per + (d * (d + 1)) / 2 + Math.max(0, d - 1)] = 255;
  return {
    _view: "attention",
    tokens: TOKENS,
    patterns: { view: new DataView(data.buffer), dtype: "uint8", shape: [L, H, per] },
    causal: true,
    selected_layer: 0,
    selected_head: 0,
    selected_dest: -1,
    selected_src: -1,
  };
}

const nextFrame = (): Promise<void> => new Promise((r) => setTimeout(r, 40));

let cleanup: (() => void) | void = undefined;
afterEach(() => {
  if (typeof cleanup === "function") cleanup();
  cleanup = undefined;
  document.body.replaceChildren();
});

function mount(): { m: FakeModel<AttentionTraits>; el: HTMLElement } {
  const m = new FakeModel(state());
  const el = document.createElement("div");
  document.body.append(el);
  cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el };
}

describe("attention view", () => {
  it("draws a thumbnail per head, a large pattern and the tokens as text", () => {
    const { el } = mount();
    expect(el.querySelectorAll(".cw-thumb").length).toBe(6);
    expect(el.querySelectorAll(".cw-main canvas").length).toBe(1);
    const tokens = [...el.querySelectorAll(".cw-token")].map((t) => t.textContent);
    expect(tokens).toEqual(["<bos>", "·the", "·cat", "⏎", "<b>x</b>"]);
    expect(el.querySelector("b")).toBeNull();
    expect(el.querySelector(".cw-thumb.cw-selected")?.textContent).toBe("L0H0");
  });

  it("clicking a thumbnail selects its layer and head in the kernel", () => {
    const { m, el } = mount();
    (el.querySelectorAll(".cw-thumb")[4] as HTMLElement).click();
    expect(m.saves).toEqual([{ selected_layer: 1, selected_head: 1 }]);
  });

  it("clicking a token selects it as destination; clicking again clears", () => {
    const { m, el } = mount();
    const token = el.querySelectorAll(".cw-token")[2] as HTMLElement;
    token.click();
    expect(m.get("selected_dest")).toBe(2);
    token.click();
    expect(m.saves).toEqual([{ selected_dest: 2 }, { selected_dest: -1 }]);
  });

  it("redraws when the kernel changes the selection", async () => {
    const { m, el } = mount();
    m.fromKernel({ selected_layer: 1, selected_head: 2, selected_dest: 3 });
    await nextFrame();
    expect(el.querySelector(".cw-thumb.cw-selected")?.textContent).toBe("L1H2");
    const spans = el.querySelectorAll<HTMLElement>(".cw-token");
    expect(spans[3]?.classList.contains("cw-dest")).toBe(true);
    // destination 3 attends to token 2 only: that token is shaded, the others are not
    expect(spans[2]?.style.backgroundColor).not.toBe("");
    expect(spans[1]?.style.backgroundColor).toBe("");
    expect(el.querySelector(".cw-caption")?.textContent).toMatch(/Layer 1, head 2/);
  });

  it("ignores an out-of-range selection instead of failing", async () => {
    const { m, el } = mount();
    m.fromKernel({ selected_head: 99 });
    await nextFrame();
    expect(el.querySelector(".cw-thumb.cw-selected")?.textContent).toBe("L0H0");
  });

  it("shows a plain error for data that does not match the tokens", () => {
    const m = new FakeModel({ ...state(), tokens: ["a"] });
    const el = document.createElement("div");
    cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
    expect(el.querySelector(".cw-error")?.textContent).toMatch(/do not match 1 tokens/);
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
