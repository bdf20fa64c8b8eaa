// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { decodeArray } from "../src/lib/arrays";
import { orderBars, percent, predictions, predictionText, probIndex, sumSentence, waterfall } from "../src/lib/lens";
import type { LogitAttributionTraits } from "../src/views/logitattribution";
import type { LogitLensTraits } from "../src/views/logitlens";
import { nextFrame, viewsCleanedAfterEach, wire } from "./weightspace-fixtures";

function lensState(extra: Partial<LogitLensTraits> = {}): LogitLensTraits {
  // 2 rows × 3 positions × top-2, indices into vocab
  return {
    _view: "logitlens",
    tokens: ["<s>", " def", "<img src=x>"],
    layer_labels: ["before L0", "final"],
    vocab: [" the", "<b>x</b>", "\n"],
    top_ids: wire(new Int32Array([0, 1, 1, 0, 2, 0, 1, 2, 0, 1, 2, 1]), [2, 3, 2]),
    top_probs: wire(new Float32Array([0.5, 0.2, 0.9, 0.05, 0.3, 0.3, 0.7, 0.1, 0.4, 0.2, 0.99, 0.01]), [2, 3, 2]),
    model_name: "toy",
    selected_layer: 1,
    selected_pos: -1,
    ...extra,
  };
}

function barState(extra: Partial<LogitAttributionTraits> = {}): LogitAttributionTraits {
  return {
    _view: "logitattribution",
    values: wire(new Float64Array([0.5, -1, 3, 0.25]), [4]),
    labels: ["embed", "L0H0", "L0H1", "unembed bias"],
    kinds: ["embed", "head", "head", "bias"],
    bar_layers: [-1, 0, 0, -1],
    bar_heads: [-1, 0, 1, -1],
    logit: 2.75,
    metric: "logit of the answer",
    by: "head",
    caption: "direct logit attribution on 'toy'",
    model_name: "toy",
    order: "model",
    selected_layer: 0,
    selected_head: 1,
    ...extra,
  };
}

const lens = viewsCleanedAfterEach(lensState);
const attribution = viewsCleanedAfterEach(barState);

describe("lens and attribution pieces", () => {
  it("reads a cell's top-k best first, in words, with tokens as visible text", () => {
    const s = lensState();
    const preds = predictions(decodeArray(s.top_ids), decodeArray(s.top_probs), s.vocab, 1, 2);
    expect(preds.map((p) => p.token)).toEqual(["\n", "<b>x</b>"]);
    expect(predictionText(preds)).toBe("'⏎' 99%, '<b>x</b>' 1.0%");
    expect(predictions(decodeArray(s.top_ids), decodeArray(s.top_probs), s.vocab, 2, 0)).toEqual([]);
    expect([percent(0.314), percent(0.004), percent(Number.NaN)]).toEqual(["31%", "0.40%", "–"]);
    expect([probIndex(0), probIndex(1), probIndex(2)]).toEqual([128, 255, 255]);
  });

  it("lays bars end to end so that they sum to the total, and orders them by size on request", () => {
    const bars = [
      { label: "a", value: 1, kind: "embed", layer: -1, head: -1 },
      { label: "b", value: -3, kind: "head", layer: 0, head: 0 },
      { label: "c", value: 2.5, kind: "head", layer: 0, head: 1 },
    ];
    expect(waterfall(bars)).toEqual({ starts: [0, 1, -2], ends: [1, -2, 0.5], total: 0.5, lo: -2, hi: 1 });
    expect(orderBars(bars, "size").map((b) => b.label)).toEqual(["b", "c", "a"]);
    expect(orderBars(bars, "model").map((b) => b.label)).toEqual(["a", "b", "c"]);
    expect(sumSentence(0.5, 0.5, "logit")).toBe("logit: the parts sum to 0.500; the model's logit is 0.500 (equal).");
    expect(sumSentence(0.5, null, "logit")).toBe("logit: the parts sum to 0.500.");
  });
});

describe("logit lens view", () => {
  it("draws one cell per (row, position) with its top token as text, and answers hover with the top-k", () => {
    const { el } = lens();
    expect(el.dataset.cwView).toBe("logitlens");
    expect(el.querySelectorAll("[data-cw-row][data-cw-pos]")).toHaveLength(6);
    expect(el.querySelector("b, img")).toBeNull();
    expect(Array.from(el.querySelectorAll(".cw-top"), (t) => t.textContent)).toEqual(["·the", "<b>x</b>", "⏎", "<b>x</b>", "·the", "⏎"]);
    expect(Array.from(el.querySelectorAll("[data-cw-axis]"), (t) => t.textContent)).toEqual(["<s>", "·def", "<img·src=x>"]);
    el.querySelector("[data-cw-row='0'][data-cw-pos='1'] rect")!.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("before L0 · pos 1 '·def' predicts '<b>x</b>' 90%, '·the' 5.0%");
  });

  it("a click selects the row and the position", async () => {
    const { m, el } = lens();
    el.querySelector("[data-cw-row='0'][data-cw-pos='2'] rect")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_layer: 0, selected_pos: 2 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/^before L0 · pos 2 '<img·src=x>' predicts '⏎' 30%.*\(selected\)$/);
  });
});

describe("logit attribution view", () => {
  it("draws a bar per part, the sum and the model's logit; a click on a head's bar selects it", async () => {
    const { m, el } = attribution();
    expect(el.querySelectorAll("[data-cw-bar]")).toHaveLength(4);
    expect(el.querySelector(".cw-total")).not.toBeNull();
    expect(el.querySelector(".cw-logit")).not.toBeNull();
    expect(el.querySelector(".cw-caption")?.textContent).toContain("the parts sum to 2.750; the model's logit is 2.750 (equal)");
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("L0H1: +3.000 (running sum 2.500) selected; hover a bar for its value");
    el.querySelector("[data-cw-layer='0'][data-cw-head='0'] rect")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_head: 0 }]);
    el.querySelector("[data-cw-bar='0'] rect")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toHaveLength(1); // (not a head)
    el.querySelector<HTMLButtonElement>(".cw-segmented button[data-value='size']")!.click();
    await nextFrame();
    expect(m.saves.at(-1)).toEqual({ order: "size" });
    expect(Array.from(el.querySelectorAll("[data-cw-bar] text:first-of-type"), (t) => t.textContent)).toEqual(["L0H1", "L0H0", "embed", "unembed bias"]);
  });
});
