import { describe, expect, it } from "vitest";
import { clampPage, pageCount, pageOf, pageSlice, sortedOrder } from "../src/lib/table";

describe("table sorting and paging", () => {
  it("sorts stably, NaN last in both directions", () => {
    const v = [3, Number.NaN, 1, 3, 2];
    expect(sortedOrder(5, (i) => v[i] as number, "asc")).toEqual([2, 4, 0, 3, 1]);
    expect(sortedOrder(5, (i) => v[i] as number, "desc")).toEqual([0, 3, 4, 2, 1]);
    expect(sortedOrder(3, (i) => ["b", "a", "b"][i] as string, "asc")).toEqual([1, 0, 2]);
  });

  it("pages: counts, clamping, slices and the page of a row", () => {
    expect(pageCount(0, 10)).toBe(1);
    expect(pageCount(25, 10)).toBe(3);
    expect(clampPage(7, 25, 10)).toBe(2);
    expect(clampPage(-1, 25, 10)).toBe(0);
    expect(clampPage(Number.NaN, 25, 10)).toBe(0);
    const order = Array.from({ length: 25 }, (_, i) => 24 - i);
    const s = pageSlice(order, 2, 10);
    expect(s).toEqual({ rows: [4, 3, 2, 1, 0], first: 21, last: 25, page: 2 });
    expect(pageSlice([], 0, 10)).toEqual({ rows: [], first: 0, last: 0, page: 0 });
    expect(pageOf(19, 10)).toBe(1);
    expect(pageOf(-1, 10)).toBe(0);
  });
});
