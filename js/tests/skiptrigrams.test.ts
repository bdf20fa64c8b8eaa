// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { decodeArray } from "../src/lib/arrays";
import {
  currentListing,
  emptyUpdates,
  findToken,
  headListing,
  precomputedSources,
  sortListing,
  sourceListing,
  takeUpdate,
  toTrigramData,
  withUpdates,
} from "../src/lib/trigrams";
import { nextFrame, TOKENS, trigramState, viewsCleanedAfterEach } from "./weightspace-fixtures";

const view = viewsCleanedAfterEach(trigramState);

function data() {
  const s = trigramState();
  return toTrigramData(
    decodeArray(s.token_ids),
    s.token_strs,
    decodeArray(s.rows),
    decodeArray(s.row_values),
    decodeArray(s.profile_sources),
    decodeArray(s.profile_tokens),
    decodeArray(s.profile_values),
    decodeArray(s.ready),
    decodeArray(s.profile_order),
  );
}

const rowsText = (el: HTMLElement) => [...el.querySelectorAll("tr[data-cw-row]")].map((tr) => tr.getAttribute("data-cw-row"));

describe("skip-trigram logic", () => {
  it("lists a head's rows in canonical order, skipping padding", () => {
    const rows = headListing(data(), 0, 0)!;
    expect(rows.map((r) => [r.source, r.dest, r.out])).toEqual([[1, 2, 1], [2, 3, 4], [3, 4, 5], [4, 5, 6]]);
    expect(headListing(data(), 1, 2)).toBeNull();
  });

  it("lists a source's triples in the kernel's order of rank pairs", () => {
    const order = data().order; // the sum of the ranks, then destination rank
    const rows = sourceListing(9, [10, 11], [2, 1], [20, 21], [3, 0.5], order);
    expect(rows.map((r) => [r.dest, r.out])).toEqual([[10, 20], [10, 21], [11, 20], [11, 21]]);
    expect(rows[1]).toMatchObject({ qk: 2, ov: 0.5 });
    const reversed = Int32Array.from([1, 1, 1, 0, 0, 1, 0, 0]);
    expect(sourceListing(9, [10, 11], [2, 1], [20, 21], [3, 0.5], reversed).map((r) => [r.dest, r.out])).toEqual([[11, 21], [11, 20], [10, 21], [10, 20]]);
  });

  it("says whether a listing is precomputed, live, or needs the kernel", () => {
    const d = data();
    expect(currentListing(d, 0, 0, -1, null).state).toBe("ok");
    expect(currentListing(d, 1, 2, -1, null).state).toBe("head-missing");
    expect(currentListing(d, 0, 0, 101, null).rows.map((r) => r.out)).toEqual([7, 1, 7, 1]);
    expect(currentListing(d, 0, 0, 107, null).state).toBe("source-missing");
    const live = { layer: 0, head: 0, source: 7, dest: [1], qk: [0.3], out: [2], ov: [0.4] };
    expect(currentListing(d, 0, 0, 107, live)).toMatchObject({ state: "ok", rows: [{ source: 7, dest: 1, out: 2 }] });
    expect(currentListing(d, 0, 1, 107, live).state).toBe("source-missing");
    expect(precomputedSources(d, 0, 0)).toEqual([1, 2, 3, 4]);
  });

  it("sorts by value or by token text", () => {
    const rows = headListing(data(), 0, 0)!;
    expect(sortListing(rows, TOKENS, "qk", "desc")).toEqual([3, 2, 1, 0]);
    expect(sortListing(rows, TOKENS, "ov", "asc")).toEqual([3, 2, 1, 0]);
    expect(sortListing(rows, TOKENS, "rank", "asc")).toEqual([0, 1, 2, 3]);
    // by code unit: "\n" < " the" < "<b>x</b>" < "cat"
    expect(sortListing(rows, TOKENS, "source", "asc")).toEqual([2, 0, 1, 3]);
  });

  it("finds a token by its text or its visible form", () => {
    expect(findToken(TOKENS, [0, 1, 2, 3], " the")).toBe(1);
    expect(findToken(TOKENS, [0, 1, 2, 3], "·the")).toBe(1);
    expect(findToken(TOKENS, [0, 1, 2, 3], "⏎")).toBe(3);
    expect(findToken(TOKENS, [0, 1, 2, 3], "zzz")).toBe(-1);
  });
});

describe("skip-trigram view", () => {
  it("shows the rows with tokens as text and flags copying", () => {
    const { el } = view();
    expect(el.dataset.cwView).toBe("skiptrigrams");
    expect(rowsText(el)).toEqual(["0", "1", "2", "3"]);
    expect(el.querySelector("tbody b")).toBeNull();
    expect([...el.querySelectorAll("tbody .cw-tok")].map((t) => t.textContent)).toContain("<b>x</b>");
    expect(el.querySelector("tr[data-cw-row='0'] .cw-copy")?.textContent).toBe("copy");
    expect(el.querySelector("tr[data-cw-row='1'] .cw-copy")).toBeNull();
    expect(el.querySelector("[data-cw-status]")?.textContent).toBe("L0H0 selected");
  });

  it("selecting a row sets selected_row and describes it", async () => {
    const { m, el } = view();
    (el.querySelector("tr[data-cw-row='2'] td") as HTMLElement).click();
    expect(m.saves).toEqual([{ selected_row: 2 }]);
    await nextFrame();
    expect(el.querySelector("tr.cw-selected")?.getAttribute("data-cw-row")).toBe("2");
    expect(el.querySelector("[data-cw-status]")?.textContent).toMatch(/row 3: “⏎” … “cat” → “dog”/);
  });

  it("sorts by a column and pages", async () => {
    const { el } = view();
    (el.querySelector("th[data-sort='qk']") as HTMLElement).click();
    await nextFrame();
    expect(rowsText(el)).toEqual(["3", "2", "1", "0"]);
    const size = el.querySelector("select:not([title])") as HTMLSelectElement | null;
    expect(size).not.toBeNull();
  });

  it("clicking a source token lists that source's precomputed triples", async () => {
    const { m, el } = view();
    (el.querySelector("tr[data-cw-row='1'] [data-cw-source]") as HTMLElement).click();
    expect(m.get("source_token")).toBe(102);
    await nextFrame();
    expect(rowsText(el)).toEqual(["0", "1", "2", "3"]);
    expect(el.querySelector(".cw-title")?.textContent).toContain("source “<b>x</b>”");
  });

  it("offline: a source that was not precomputed is explained, not computed", async () => {
    const { m, el } = view({ __offline__: true, source_token: 107 });
    expect(rowsText(el)).toEqual([]);
    expect(el.querySelector(".cw-message")?.textContent).toMatch(/not precomputed in this page; other source tokens need a live kernel/);
    const input = el.querySelector("input[type='search']") as HTMLInputElement;
    input.value = "unknown";
    (el.querySelector(".cw-search button") as HTMLButtonElement).click();
    await nextFrame();
    expect(m.get("source_query")).toBe("");
    expect(el.querySelector(".cw-message")?.textContent).toMatch(/needs a live kernel/);
    input.value = "·the";
    (el.querySelector(".cw-search button") as HTMLButtonElement).click();
    expect(m.get("source_token")).toBe(101);
  });

  it("live: an unknown search text goes to the kernel, and its answer is shown", async () => {
    const { m, el } = view();
    const input = el.querySelector("input[type='search']") as HTMLInputElement;
    input.value = "elephant";
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(m.saves.at(-1)).toEqual({ source_query: "elephant" });
    m.fromKernel({ source_query: "", source_message: "“elephant” is not a token of this model" });
    await nextFrame();
    expect(el.querySelector(".cw-message")?.textContent).toContain("is not a token");
  });

  it("a head that was not precomputed: offline says so, live waits for the kernel", async () => {
    const off = view({ __offline__: true, selected_layer: 1, selected_head: 2 });
    expect(off.el.querySelector(".cw-message")?.textContent).toMatch(/was not precomputed in this page/);
    const live = view({ selected_layer: 1, selected_head: 2 });
    expect(live.el.querySelector(".cw-message")?.textContent).toMatch(/Computing/);
  });
});

describe("heads computed on demand arrive alone", () => {
  const deliver = (m: unknown, content: unknown, buffers: DataView[]) => {
    const handlers = (m as { handlers: Map<string, Set<(...a: unknown[]) => void>> }).handlers;
    for (const h of handlers.get("msg:custom") ?? []) h(content, buffers);
  };
  const dv = (a: Int32Array | Float32Array) => new DataView(a.buffer);
  // head (1, 2) of the fixture: R = 6, S = 5, P = 2; one new token (index 8)
  const slices = () => {
    const rows = new Int32Array(6 * 4).fill(-1);
    rows.set([8, 2, 8, 1]);
    const values = new Float32Array(6 * 2);
    values.set([0.25, 9]);
    return [dv(rows), dv(values), dv(new Int32Array(5).fill(-1)), dv(new Int32Array(5 * 2 * 2).fill(-1)), dv(new Float32Array(5 * 2 * 2))];
  };
  const update = { type: "trigram_update", tokens_from: 8, token_ids: [555], token_strs: ["<new>"], heads: [[1, 2]] };

  it("takes the head and its new tokens into the view's data, and checks them", () => {
    const base = data();
    const u = emptyUpdates();
    expect(takeUpdate(u, base, { ...update, heads: [[1, 2]] }, slices().slice(0, 4))).toBe(false); // a buffer missing
    expect(takeUpdate(u, base, { ...update, tokens_from: 9 }, slices())).toBe(false); // tokens the view never had
    expect(takeUpdate(u, base, update, slices())).toBe(true);
    const d = withUpdates(base, u);
    expect(d.tokenStrs[8]).toBe("<new>");
    expect(headListing(d, 1, 2)!.map((r) => [r.source, r.dest, r.out, r.ov])).toEqual([[8, 2, 8, 9]]);
    expect(headListing(base, 1, 2)).toBeNull(); // the state itself is left as it was
    // a repeat (the reply to "want_trigram_update") adds nothing twice
    expect(takeUpdate(u, base, update, slices())).toBe(true);
    expect(withUpdates(base, u).tokenStrs.length).toBe(9);
  });

  it("the view shows the head when its message comes", async () => {
    const { m, el } = view({ selected_layer: 1, selected_head: 2 });
    expect(el.querySelector(".cw-message")?.textContent).toMatch(/Computing/);
    deliver(m, update, slices());
    await nextFrame();
    expect(rowsText(el)).toEqual(["0"]);
    expect(el.querySelector("tr[data-cw-row='0']")?.textContent).toContain("<new>");
    expect(el.querySelector("tr[data-cw-row='0'] b")).toBeNull(); // token text stays text
  });
});
