import { describe, expect, it } from "vitest";
import { changeEvents, childSpecs, resolveKey, scopedModel, type ScopeSpec } from "../src/lib/scoped";
import { FakeModel } from "./fake-model";

const SPEC: ScopeSpec = {
  prefix: "trigram_",
  data: "trigram_data",
  shared: { layer: "selected_layer", head: "selected_head" },
  own: ["source_token", "selected_row"],
};

function explorer() {
  return new FakeModel<Record<string, unknown>>({
    selected_layer: 1,
    selected_head: 2,
    trigram_data: { rows: "ROWS", k: 5 },
    trigram_source_token: 7,
  });
}

describe("scoped model (a view inside the explorer)", () => {
  it("reads shared, own and data traits under the view's names", () => {
    const m = explorer();
    const s = scopedModel<Record<string, unknown>>(m.asModel(), SPEC);
    expect(s.get("layer")).toBe(1);
    expect(s.get("head")).toBe(2);
    expect(s.get("source_token")).toBe(7);
    expect(s.get("rows")).toBe("ROWS");
    expect(s.get("missing")).toBeUndefined();
    expect(resolveKey(SPEC, "k")).toEqual({ kind: "data", name: "trigram_data", key: "k" });
    expect(resolveKey(SPEC, "selected_row")).toEqual({ kind: "own", name: "trigram_selected_row" });
    expect(changeEvents(SPEC, "layer")).toEqual(["change:selected_layer"]);
    expect(changeEvents(SPEC, "rows")).toEqual(["change:trigram_data"]);
    expect(changeEvents(SPEC, "source_token")).toEqual(["change:trigram_source_token"]);
  });

  it("writes the shared selection and the view's own traits, and saves through", () => {
    const m = explorer();
    const s = scopedModel<Record<string, unknown>>(m.asModel(), SPEC);
    s.set("head", 0);
    s.set("selected_row", 3);
    s.save_changes();
    expect(m.get("selected_head")).toBe(0);
    expect(m.get("trigram_selected_row")).toBe(3);
    expect(m.saves).toEqual([{ selected_head: 0, trigram_selected_row: 3 }]);
  });

  it("follows changes of the mapped traits and removes exactly its own listeners", () => {
    const m = explorer();
    const s = scopedModel<Record<string, unknown>>(m.asModel(), SPEC);
    const calls: string[] = [];
    const a = () => calls.push("layer");
    const b = () => calls.push("rows");
    s.on("change:layer", a);
    s.on("change:rows", b);
    const other = () => calls.push("other");
    m.on("change:selected_layer", other);
    m.fromKernel({ selected_layer: 0 });
    m.fromKernel({ trigram_data: { rows: "NEW" } });
    expect(calls).toEqual(["layer", "other", "rows"]);
    s.off("change:layer", a);
    s.off();
    expect(m.listenerCount()).toBe(1); // the explorer's own listener stays
  });
});

describe("the explorer's children, as the kernel describes them", () => {
  it("keeps well-formed entries and drops the rest", () => {
    const good = { view: "eigen", prefix: "eigen_", data: "eigen_data", own: ["method"], shared: { selected_layer: "selected_layer" } };
    expect(childSpecs([good, { ...good, own: [1] }, { ...good, shared: null }, "eigen", null])).toEqual([good]);
    expect(childSpecs(undefined)).toEqual([]);
  });
});
