import { describe, expect, it } from "vitest";
import { safeModel, safeText, safeValue } from "../src/lib/safemodel";
import { visibleLabel, visibleToken } from "../src/lib/tokens";
import { MIRROR_CASES } from "./tokens-mirror";

const HOSTILE = ["abc\u202eexe.txt", "x\u200by", "\u2066iso\u2069", "tag\udb40\udc41", "cr\rlf", "c1\u0085", "bom\ufeff"];

describe("safeText", () => {
  it("escapes every character that could reorder or hide text, as visibleLabel writes it", () => {
    for (const s of HOSTILE) {
      const safe = safeText(s);
      expect([...safe].some((ch) => /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/.test(ch) || (ch.codePointAt(0) ?? 0) >= 0xe0000)).toBe(false);
      expect(visibleLabel(safe)).toBe(visibleLabel(s));
    }
    expect(safeText("abc\u202eexe.txt")).toBe("abc\\u202eexe.txt");
  });

  it("leaves tokens looking exactly as visibleToken shows them, newline and tab included", () => {
    for (const [token] of MIRROR_CASES) expect(visibleToken(safeText(token))).toBe(visibleToken(token));
    expect(safeText("a\nb\tc")).toBe("a\nb\tc");
  });

  it("returns the same object when nothing needs escaping (no copies of clean data)", () => {
    const clean = { labels: ["L0", "L1"], nested: { title: "map" }, data: new DataView(new ArrayBuffer(4)) };
    expect(safeValue(clean)).toBe(clean);
    const dirty = { [`k\u202e`]: [`v\u202e`, 1], data: clean.data };
    expect(safeValue(dirty)).toEqual({ "k\\u202e": ["v\\u202e", 1], data: clean.data });
  });
});

type Handler = (...args: unknown[]) => void;

/** A model that can deliver a custom message (the shared FakeModel's events carry no arguments). */
class MessageModel {
  handlers = new Map<string, Set<Handler>>();
  constructor(private state: Record<string, unknown>) {}
  get(key: string): unknown {
    return this.state[key];
  }
  on(event: string, h: Handler): void {
    this.handlers.set(event, (this.handlers.get(event) ?? new Set()).add(h));
  }
  off(event: string, h: Handler): void {
    this.handlers.get(event)?.delete(h);
  }
  emit(event: string, ...args: unknown[]): void {
    for (const h of this.handlers.get(event) ?? []) h(...args);
  }
}

describe("safeModel", () => {
  it("escapes what get returns and what msg:custom carries, and unsubscribes what it subscribed", () => {
    const model = new MessageModel({ caption: "metric \u202eevil", n: 3 });
    const safe = safeModel(model as never) as unknown as MessageModel;
    expect(safe.get("caption")).toBe("metric \\u202eevil");
    expect(safe.get("caption")).toBe(safe.get("caption")); // memoised while the trait is unchanged
    expect(safe.get("n")).toBe(3);
    const got: unknown[] = [];
    const handler = (msg: unknown) => got.push(msg);
    safe.on("msg:custom", handler);
    model.emit("msg:custom", { status: "done \u200b" });
    expect(got).toEqual([{ status: "done \\u200b" }]);
    safe.off("msg:custom", handler);
    model.emit("msg:custom", { status: "again" });
    expect(got).toHaveLength(1);
  });
});
