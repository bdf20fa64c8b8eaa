import { describe, expect, it } from "vitest";
import { indexOr, isValidIndex, NONE, onTraits, perFrame, setTraits, toggle } from "../src/lib/selection";
import { FakeModel } from "./fake-model";

describe("selection helpers", () => {
  it("checks indices", () => {
    expect(isValidIndex(0, 3)).toBe(true);
    expect(isValidIndex(3, 3)).toBe(false);
    expect(isValidIndex(-1, 3)).toBe(false);
    expect(isValidIndex(-1, 3, true)).toBe(true);
    expect(isValidIndex(1.5, 3)).toBe(false);
    expect(isValidIndex("1", 3)).toBe(false);
    expect(indexOr(9, 3, 0)).toBe(0);
    expect(toggle(2, 2)).toBe(NONE);
    expect(toggle(2, 1)).toBe(1);
  });

  it("sends several traits in one save, and nothing when nothing changed", () => {
    const m = new FakeModel({ a: 1, b: 2 });
    setTraits(m.asModel(), { a: 5, b: 6 });
    setTraits(m.asModel(), { a: 5 });
    expect(m.saves).toEqual([{ a: 5, b: 6 }]);
  });

  it("removes its listeners", () => {
    const m = new FakeModel({ a: 1, b: 2 });
    let calls = 0;
    const off = onTraits(m.asModel(), ["a", "b"], () => calls++);
    m.fromKernel({ a: 3 });
    off();
    m.fromKernel({ b: 4 });
    expect(calls).toBe(1);
    expect(m.listenerCount()).toBe(0);
  });

  it("coalesces redraws into one per frame, and cancels", async () => {
    let n = 0;
    const f = perFrame(() => n++);
    f.schedule();
    f.schedule();
    await new Promise((r) => setTimeout(r, 50));
    expect(n).toBe(1);
    f.schedule();
    f.cancel();
    await new Promise((r) => setTimeout(r, 50));
    expect(n).toBe(1);
  });
});
