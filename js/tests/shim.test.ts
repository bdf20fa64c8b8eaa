import { deflateSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { b64bytes, LinkGroup, OfflineModel, revive } from "../src/shim/offline";

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

describe("offline model of exported pages", () => {
  it("revives plain and deflated buffers where the page state holds them", async () => {
    const raw = new Uint8Array([1, 2, 3, 250]);
    const state = (await revive({
      a: { view: { __b64__: b64(raw) }, dtype: "uint8", shape: [4] },
      b: [{ __b64z__: b64(deflateSync(Buffer.from(raw))) }],
      text: "<script>",
      n: null,
    })) as Record<string, any>;
    const a = state.a.view as DataView;
    expect(Array.from(new Uint8Array(a.buffer, a.byteOffset, a.byteLength))).toEqual([1, 2, 3, 250]);
    const b = state.b[0] as DataView;
    expect(Array.from(new Uint8Array(b.buffer, b.byteOffset, b.byteLength))).toEqual([1, 2, 3, 250]);
    expect(state.text).toBe("<script>");
    expect(state.n).toBeNull();
    expect(Array.from(b64bytes("AAE="))).toEqual([0, 1]);
  });

  it("says it is offline, notifies changes once, and removes listeners", () => {
    const m = new OfflineModel({ selected_head: 0 });
    const seen: unknown[] = [];
    const cb = (v: unknown) => seen.push(v);
    m.on("change:selected_head change:other", cb);
    m.set("selected_head", 2);
    m.set("selected_head", 2); // no change, no event
    m.set("other", "x");
    m.off("change:selected_head", cb);
    m.set("selected_head", 3);
    expect(seen).toEqual([2, "x"]);
    expect(m.get("__offline__")).toBe(true);
    m.off();
    m.set("other", "y");
    expect(seen).toEqual([2, "x"]);
  });

  it("links the head selection across a page's widgets that hold it", () => {
    const scatter = new OfflineModel({ selected_layer: 0, selected_head: 0, method: "eigen" });
    const table = new OfflineModel({ selected_layer: 0, selected_head: 0 });
    const terms = new OfflineModel({ selected_layer: -1, selected_order: -1 }); // no selected_head
    const group = new LinkGroup(["selected_layer", "selected_head"]);
    for (const m of [scatter, table, terms]) group.add(m);
    const heard: unknown[] = [];
    table.on("change:selected_head", (v) => heard.push(v));
    scatter.set("selected_layer", 1);
    scatter.set("selected_head", 2);
    expect([table.get("selected_layer"), table.get("selected_head")]).toEqual([1, 2]);
    expect(terms.get("selected_layer")).toBe(1);
    expect(terms.has("selected_head")).toBe(false);
    expect(heard).toEqual([2]); // once: the echo back to the scatter stops there
    table.set("selected_head", 0);
    expect(scatter.get("selected_head")).toBe(0);
    expect(scatter.get("method")).toBe("eigen"); // only the linked names
  });
});

describe("a head is one selection in a linked page", () => {
  it("moves every linked view to the clicked head even when the click keeps the layer", () => {
    const scatter = new OfflineModel({ selected_layer: 1, selected_head: 5 });
    const composition = new OfflineModel({ selected_layer: 0, selected_head: 0 });
    const terms = new OfflineModel({ selected_layer: 0 });
    const group = new LinkGroup(["selected_layer", "selected_head"]);
    for (const m of [scatter, composition, terms]) group.add(m);
    // joining the group, every view starts on the first one's head
    expect([composition.get("selected_layer"), composition.get("selected_head"), terms.get("selected_layer")]).toEqual([1, 5, 1]);
    composition.set("selected_layer", 0);
    composition.set("selected_head", 3);
    scatter.set("selected_head", 7); // same layer as before in the scatter (0): the head moves as one
    expect([composition.get("selected_layer"), composition.get("selected_head")]).toEqual([0, 7]);
    composition.set("selected_head", 10);
    expect([scatter.get("selected_layer"), scatter.get("selected_head"), terms.get("selected_layer")]).toEqual([0, 10, 0]);
    // a layer clicked in term importance invents no head: the head views stay on L0H10
    terms.set("selected_layer", 1);
    expect([scatter.get("selected_layer"), scatter.get("selected_head")]).toEqual([0, 10]);
    expect([composition.get("selected_layer"), composition.get("selected_head")]).toEqual([0, 10]);
  });
});

describe("a head chosen moves the position of a view that follows heads", () => {
  it("sets the follower's position to the head's entry and the group's position with it", () => {
    const attention = new OfflineModel({ selected_layer: 0, selected_head: 0, selected_dest: 9 });
    const prompt = new OfflineModel({ selected_dest: 9, head_positions: [[3, -1], [5, 7]] });
    const lens = new OfflineModel({ selected_pos: 9 });
    const group = new LinkGroup(["selected_layer", "selected_head", "selected_dest"]);
    group.add(attention);
    group.add(prompt);
    group.add(lens, ["selected_dest"], { selected_dest: "selected_pos" });
    expect(prompt.get("selected_dest")).toBe(9); // joining moves no position
    attention.set("selected_layer", 1);
    attention.set("selected_head", 1);
    expect([prompt.get("selected_dest"), attention.get("selected_dest"), lens.get("selected_pos")]).toEqual([7, 7, 7]);
    attention.set("selected_dest", 2); // a position chosen afterwards still moves everything
    expect(prompt.get("selected_dest")).toBe(2);
    attention.set("selected_layer", 0);
    attention.set("selected_head", 1); // -1: this head moves no position
    expect(prompt.get("selected_dest")).toBe(2);
  });
});
