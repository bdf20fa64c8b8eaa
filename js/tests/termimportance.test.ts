// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { barDomain, orderLabel } from "../src/views/termimportance";
import { nextFrame, termState, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(termState);

describe("term importance", () => {
  it("names orders as the paper does and spans zero", () => {
    expect(orderLabel(0)).toBe("order 0 · direct path");
    expect(orderLabel(2)).toBe("order 2 · virtual heads");
    expect(orderLabel(3)).toBe("order 3");
    expect(barDomain([0.5, 2])).toEqual([0, 2]);
    expect(barDomain([-1, 2])).toEqual([-1, 2]);
    expect(barDomain([])).toEqual([0, 1]);
  });

  it("shows a bar with its number per order and per layer; clicking selects", async () => {
    const { m, el } = view();
    expect(el.dataset.cwView).toBe("termimportance");
    expect(el.querySelectorAll("[data-cw-order]")).toHaveLength(3);
    expect(el.querySelectorAll("[data-cw-layer]")).toHaveLength(2);
    expect(el.textContent).toContain("1.500");
    expect(el.textContent).toContain("full model 3.400 nats");
    el.querySelector("[data-cw-order='1'] rect")!.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(m.saves).toEqual([{ selected_order: 1 }]);
    await nextFrame();
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("order 1 · single heads selected: −1.500 nats");
  });
});
