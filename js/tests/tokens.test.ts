// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { MAX_TOKEN_CHARS, setTokenText, tokenLabel, tokenSpan, visibleToken } from "../src/lib/tokens";

describe("visibleToken", () => {
  it("makes whitespace visible", () => {
    expect(visibleToken(" the")).toBe("·the");
    expect(visibleToken("\n\n")).toBe("⏎⏎");
    expect(visibleToken("\tx")).toBe("→x");
  });

  it("escapes other control characters as \\xNN", () => {
    expect(visibleToken("\r")).toBe("\\x0d");
    expect(visibleToken("a\u0000b")).toBe("a\\x00b");
    expect(visibleToken("\u007f\u0085")).toBe("\\x7f\\x85");
  });

  it("escapes bidirectional controls and zero-width characters as \\uXXXX", () => {
    expect(visibleToken("abc\u202edef")).toBe("abc\\u202edef");
    expect(visibleToken("\u2066x\u2069")).toBe("\\u2066x\\u2069");
    expect(visibleToken("a\u200bb\ufeff")).toBe("a\\u200bb\\ufeff");
    expect(visibleToken("\u200e\u200f\u2028")).toBe("\\u200e\\u200f\\u2028");
  });

  it("keeps right-to-left letters and combining marks, which are text", () => {
    expect(visibleToken("\u05e9\u05dc\u05d5\u05dd")).toBe("\u05e9\u05dc\u05d5\u05dd");
    expect(visibleToken("e\u0301")).toBe("e\u0301");
  });

  it("keeps other characters, including astral ones", () => {
    expect(visibleToken("déjà 🙂")).toBe("déjà·🙂");
  });
});

describe("tokenLabel", () => {
  it("truncates long tokens and keeps the full text as title", () => {
    const long = "x".repeat(100);
    const label = tokenLabel(long);
    expect(Array.from(label.text).length).toBe(MAX_TOKEN_CHARS);
    expect(label.text.endsWith("…")).toBe(true);
    expect(label.title).toBe(long);
    expect(tokenLabel("short").title).toBeNull();
  });

  it("never splits a surrogate pair", () => {
    const label = tokenLabel("🙂".repeat(50), 10);
    expect(Array.from(label.text)).toEqual([..."🙂".repeat(9), "…"]);
  });
});

describe("setTokenText", () => {
  it("writes markup as text, never as HTML", () => {
    const span = tokenSpan(document, "<img src=x onerror=alert(1)>");
    expect(span.children.length).toBe(0);
    expect(span.querySelector("img")).toBeNull();
    expect(span.textContent).toBe("<img·src=x·onerror=alert(1)>");
  });

  it("sets and clears the title", () => {
    const span = document.createElement("span");
    setTokenText(span, "y".repeat(60));
    expect(span.title).toBe("y".repeat(60));
    setTokenText(span, "y");
    expect(span.hasAttribute("title")).toBe(false);
  });
});
