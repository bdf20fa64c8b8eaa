// @vitest-environment happy-dom
// The attention view's strip: the selected head's logit effect or the model's per-token loss (./strip.ts).
import type { RenderProps } from "@anywidget/types";
import { afterEach, describe, expect, it } from "vitest";
import widget from "../src/index";
import { DIVERGING, divergingIndex, lutCss, sequentialIndex } from "../src/lib/colour";
import { fullView } from "../src/lib/viewport";
import type { AttentionTraits } from "../src/views/attention";
import { stripCells } from "../src/views/attention";
import { chooseStrip, LOSS, perTokenLoss, positionWords, stripIndex, stripShades } from "../src/views/attention/strip";
import { FakeModel } from "./fake-model";

const TOKENS = ["<bos>", " the", " cat", "\n", "<b>x</b>"];
const N = TOKENS.length;
const L = 2;
const H = 3;
const PER = (N * (N + 1)) / 2;
const LOSSES = [0.5, 1, 2, 4, Number.NaN];

type Wire = NonNullable<AttentionTraits["value_patterns"]>;

function wire(data: Uint8Array | Float32Array, shape: number[]): Wire {
  return { view: new DataView(data.buffer), dtype: data instanceof Uint8Array ? "uint8" : "float32", shape };
}

function state(overrides: Partial<AttentionTraits> = {}): AttentionTraits {
  const patterns = new Uint8Array(L * H * PER);
  for (let k = 0; k < L * H; k++) for (let d = 0; d < N; d++) patterns[k * PER + (d * (d + 1)) / 2] = 255;
  const effect = new Float32Array(L * H * N).map((_, i) => (i % N === N - 1 ? Number.NaN : (i % N) - 1.5));
  return {
    _view: "attention",
    tokens: TOKENS,
    patterns: wire(patterns, [L, H, PER]),
    causal: true,
    value_patterns: null,
    value_norms: null,
    logit_effect: wire(effect, [L, H, N]),
    per_token_loss: wire(new Float32Array(LOSSES), [N]),
    pattern_kind: "raw",
    strip: "logit_effect",
    show_diagonals: false,
    diagonals: [],
    selected_layer: 0,
    selected_head: 0,
    selected_dest: -1,
    selected_src: -1,
    ...overrides,
  };
}

const nextFrame = (): Promise<void> => new Promise((r) => setTimeout(r, 40));

let cleanup: (() => void) | void = undefined;
afterEach(() => {
  if (typeof cleanup === "function") cleanup();
  cleanup = undefined;
  document.body.replaceChildren();
});

function mount(s: AttentionTraits = state()): { m: FakeModel<AttentionTraits>; el: HTMLElement } {
  const m = new FakeModel(s);
  const el = document.createElement("div");
  document.body.append(el);
  cleanup = widget.render({ model: m.asModel(), el } as unknown as RenderProps) as (() => void) | void;
  return { m, el };
}

const button = (el: HTMLElement, value: string) => el.querySelector(`button[data-value="${value}"]`) as HTMLButtonElement;
const tokenEl = (el: HTMLElement, i: number) => el.querySelector<HTMLElement>(`[data-cw-token="${i}"]`) as HTMLElement;
const legend = (el: HTMLElement) => el.querySelector(".cw-legend")?.textContent ?? "";
const status = (el: HTMLElement) => el.querySelector("[data-cw-status]")?.textContent ?? "";
const hoverLine = (el: HTMLElement) => el.querySelector(".cw-hover")?.textContent ?? "";
/** The CSS colour a browser reports for `lutCss`'s `rgb(r, g, b)`. */
const css = (colour: string) => {
  const probe = document.createElement("span");
  probe.style.backgroundColor = colour;
  return probe.style.backgroundColor;
};

describe("attention view: the loss strip", () => {
  it("choosing Loss sets the strip trait; the legend, the tokens and the hover follow", async () => {
    const { m, el } = mount();
    expect(legend(el)).toMatch(/logit effect on next token/);
    expect(button(el, "strip").textContent).toBe("Logit effect");
    button(el, "loss").click();
    expect(m.saves).toEqual([{ strip: "loss" }]);
    await nextFrame();
    expect(button(el, "loss").getAttribute("aria-pressed")).toBe("true");
    expect(legend(el)).toMatch(/loss \(nats\) predicting the next token04\.00/);
    expect(legend(el)).not.toMatch(/logit effect/);
    expect(button(el, "strip").textContent).toBe("Loss");
    button(el, "strip").click();
    await nextFrame();
    // each token's loss as a fraction of the largest (4 nats), on the loss's sequential scale; the last has none
    LOSSES.slice(0, 4).forEach((v, i) => expect(tokenEl(el, i).style.backgroundColor).toBe(css(lutCss(LOSS, sequentialIndex(v / 4)))));
    expect(tokenEl(el, 4).style.backgroundColor).toBe("");
    expect(el.querySelector(".cw-tokens-head")?.textContent).toMatch(/loss \(nats\) predicting the next token/);
    tokenEl(el, 2).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(hoverLine(el)).toBe("destination 2 “·cat” · loss predicting “⏎”: 2.000 nats");
    tokenEl(el, 4).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(hoverLine(el)).toBe("destination 4 “<b>x</b>” (last token: no next token)");
  });

  it("the status line gives the selected destination's loss, and the logit effect strip comes back", async () => {
    const { m, el } = mount(state({ strip: "loss", selected_dest: 1 }));
    await nextFrame();
    expect(status(el)).toMatch(/destination 1 “·the” .* · loss predicting “·cat”: 1\.000 nats · logit effect on next token “·cat”: −0\.50\./);
    m.fromKernel({ strip: "logit_effect" });
    await nextFrame();
    expect(legend(el)).toMatch(/logit effect on next token−1\.50.*\+1\.50/);
    tokenEl(el, 1).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(hoverLine(el)).toBe("destination 1 “·the” · logit effect on next token “·cat”: −0.50");
    button(el, "strip").click();
    await nextFrame();
    // back on the signed scale: token 0's effect −1.5 is the scale's end
    expect(tokenEl(el, 0).style.backgroundColor).toBe(css(lutCss(DIVERGING, divergingIndex(-1.5, 1.5))));
  });

  it("without a loss its button is disabled; with only the loss the strip shows it", async () => {
    const { el } = mount(state({ per_token_loss: null }));
    expect(button(el, "loss").disabled).toBe(true);
    expect(button(el, "logit_effect").disabled).toBe(false);
    cleanup?.();
    document.body.replaceChildren();
    const only = mount(state({ logit_effect: null }));
    expect(button(only.el, "logit_effect").disabled).toBe(true);
    expect(button(only.el, "loss").getAttribute("aria-pressed")).toBe("true");
    expect(legend(only.el)).toMatch(/loss \(nats\) predicting the next token/);
    expect(button(only.el, "strip").disabled).toBe(false);
  });

  it("a batch shows the selected prompt's row of the padded loss", async () => {
    const prompts = [TOKENS, TOKENS.slice(0, 3)];
    const patterns = new Uint8Array(2 * L * H * PER);
    for (let p = 0; p < 2; p++)
      for (let k = 0; k < L * H; k++) for (let d = 0; d < prompts[p]!.length; d++) patterns[(p * L * H + k) * PER + (d * (d + 1)) / 2] = 255;
    const loss = new Float32Array([...LOSSES, 3, 6, Number.NaN, Number.NaN, Number.NaN]);
    const { el } = mount(
      state({ prompts, selected_prompt: 1, tokens: prompts[1]!, patterns: wire(patterns, [2, L, H, PER]), logit_effect: null, per_token_loss: wire(loss, [2, N]) }),
    );
    await nextFrame();
    expect(legend(el)).toMatch(/predicting the next token06\.00/);
    tokenEl(el, 0).dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    await nextFrame();
    expect(hoverLine(el)).toBe("destination 0 “<bos>” · loss predicting “·the”: 3.000 nats");
  });
});

describe("strip values", () => {
  const effect = new Float32Array([0.5, -2, Number.NaN, 1, 3, Number.NaN]); // [1 layer, 2 heads, 3 tokens]
  const loss = new Float32Array([1, 5, Number.NaN]);

  it("chooses the asked values when sent, else whichever was", () => {
    const head1 = { layer: 0, head: 1 };
    expect(chooseStrip("loss", effect, loss, head1, 2, 3)).toMatchObject({ kind: "loss", offset: 0, limit: 5 });
    expect(chooseStrip("logit_effect", effect, loss, head1, 2, 3)).toMatchObject({ kind: "logit_effect", offset: 3, limit: 3 });
    expect(chooseStrip("loss", effect, null, head1, 2, 3)?.kind).toBe("logit_effect");
    expect(chooseStrip("logit_effect", null, loss, head1, 2, 3)?.kind).toBe("loss");
    expect(chooseStrip("loss", null, null, head1, 2, 3)).toBeNull();
  });

  it("colours the loss sequentially and the effect on the diverging scale, NaN as none", () => {
    const lossStrip = chooseStrip("loss", effect, loss, { layer: 0, head: 0 }, 2, 3)!;
    expect([stripIndex(lossStrip, 0), stripIndex(lossStrip, 2.5), stripIndex(lossStrip, 5), stripIndex(lossStrip, Number.NaN)]).toEqual([0, 128, 255, -1]);
    const cells = stripCells(lossStrip.values, 0, fullView(3), 100, lossStrip.limit, (v) => stripIndex(lossStrip, v));
    expect([cells.index(0, 0), cells.index(1, 0), cells.index(2, 0)]).toEqual([sequentialIndex(0.2), 255, -1]);
    const effectStrip = chooseStrip("logit_effect", effect, loss, { layer: 0, head: 0 }, 2, 3)!;
    expect(stripIndex(effectStrip, -2)).toBe(divergingIndex(-2, 2));
    expect(stripShades(effectStrip, 0, 3)).toMatchObject({ limit: 2, lut: DIVERGING });
    const shades = stripShades(lossStrip, 0, 3);
    expect(shades.lut).toBe(LOSS);
    expect([...shades.values]).toEqual([0.2, 1, Number.NaN].map((v) => Math.fround(v)));
  });

  it("reads one text's [n] loss or a batch's row, refusing shapes that do not fit", () => {
    const batch = wire(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
    expect([...(perTokenLoss(batch, 2, 1, 3) ?? [])]).toEqual([4, 5]);
    expect([...(perTokenLoss(wire(loss, [3]), 3) ?? [])]).toEqual([1, 5, Number.NaN]);
    expect(perTokenLoss(wire(loss, [3]), 4)).toBeNull();
    expect(perTokenLoss(batch, 2, 2, 3)).toBeNull();
    expect(perTokenLoss(null, 3)).toBeNull();
  });

  it("words put the strip's value first and name the next token as text", () => {
    expect(positionWords(["a", "<i>b</i>"], 0, -0.25, 1.5, "loss")).toBe(" · loss predicting “<i>b</i>”: 1.500 nats · logit effect on next token “<i>b</i>”: −0.25");
    expect(positionWords(["a", "b"], 0, -0.25, 1.5, "logit_effect")).toBe(" · logit effect on next token “b”: −0.25 · loss predicting “b”: 1.500 nats");
    expect(positionWords(["a", "b"], 1, 0.1, null, "loss")).toBe(" (last token: no next token)");
    expect(positionWords(["a", "b"], 0, null, null, "loss")).toBe("");
  });
});
