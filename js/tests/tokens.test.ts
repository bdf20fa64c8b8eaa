// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import {
  BYTE_BASE,
  isByteCodePoint,
  MAX_TOKEN_CHARS,
  setTokenText,
  tokenLabel,
  tokenSpan,
  visibleLabel,
  visibleToken,
} from "../src/lib/tokens";
import { headLabel, layerLabel } from "../src/lib/headscores";
import { svgTitle } from "../src/lib/svg";
import { LABEL_CASES, MIRROR_CASES } from "./tokens-mirror";

/** The byte code point the kernel sends for raw byte `b` of a partial UTF-8 character. */
const byte = (b: number): string => String.fromCodePoint(BYTE_BASE + b);

describe("visibleToken", () => {
  it("makes whitespace visible", () => {
    expect(visibleToken(" the")).toBe("·the");
    expect(visibleToken("\n\n")).toBe("⏎⏎");
    expect(visibleToken("\tx")).toBe("→x");
  });

  it("escapes other C0 control characters and DEL as \\xNN", () => {
    expect(visibleToken("\r")).toBe("\\x0d");
    expect(visibleToken("a\u0000b")).toBe("a\\x00b");
    expect(visibleToken("\u007f")).toBe("\\x7f");
  });

  it("escapes C1 control characters as \\u00NN, so they never look like raw bytes", () => {
    expect(visibleToken("\u0085")).toBe("\\u0085");
    expect(visibleToken("\u0080x\u009f")).toBe("\\u0080x\\u009f");
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

describe("raw bytes and SentencePiece spaces", () => {
  it("shows byte code points (U+EF80-U+EFFF) as \\xNN", () => {
    // The first two bytes of "€" (E2 82 AC), as a byte-level BPE token.
    expect(visibleToken(byte(0xe2) + byte(0x82))).toBe("\\xe2\\x82");
    expect(visibleToken(` ${byte(0xe2)}${byte(0x80)}`)).toBe("·\\xe2\\x80");
    expect(visibleToken(byte(0x80) + byte(0xff))).toBe("\\x80\\xff");
    expect(visibleToken(`na${byte(0xc3)}`)).toBe("na\\xc3");
  });

  it("keeps the neighbours of the range and ordinary Private Use characters", () => {
    expect(isByteCodePoint(0xef7f) || isByteCodePoint(0xf000)).toBe(false);
    expect(isByteCodePoint(0xef80) && isByteCodePoint(0xefff)).toBe(true);
    expect(visibleToken("\uef7f\uf000\ue000")).toBe("\uef7f\uf000\ue000");
  });

  it("shows a SentencePiece space, which the kernel sends as a space, like any space", () => {
    expect(visibleToken(" the")).toBe("·the");
    expect(visibleToken("  ")).toBe("··");
    // A literal U+2581 that reaches the view is a real character (byte-level
    // vocabularies contain it) and stays as it is.
    expect(visibleToken("\u2581the")).toBe("\u2581the");
  });

  it("a byte-fallback newline, sent as a newline, is the newline glyph", () => {
    expect(visibleToken("\n")).toBe("⏎");
  });

  it("writes bytes as text into the page, never as markup", () => {
    const span = tokenSpan(document, `<b>${byte(0xe2)}</b>`);
    expect(span.children.length).toBe(0);
    expect(span.textContent).toBe("<b>\\xe2</b>");
  });

  it("counts an escaped byte as four characters and never cuts an escape when truncating", () => {
    const label = tokenLabel(byte(0xe2).repeat(20), 10);
    expect(label.text).toBe("\\xe2\\xe2…");
    expect(label.title).toBe("\\xe2".repeat(20));
    expect(tokenLabel(`ab${byte(0xe2)}${byte(0x82)}`, 4).text).toBe("ab…");
    expect(tokenLabel(byte(0xe2).repeat(3), 2).text).toBe("\\xe2…");
    expect(tokenLabel(byte(0xe2).repeat(2), 8)).toEqual({ text: "\\xe2\\xe2", title: null });
  });
});

describe("the Python mirror (circuitwidgets/_text.py)", () => {
  it.each(MIRROR_CASES)("shows %j as %j", (token, shown) => {
    expect(visibleToken(token)).toBe(shown);
  });
});

describe("visibleLabel", () => {
  it.each(LABEL_CASES)("shows the name %j as %j", (text, shown) => {
    expect(visibleLabel(text)).toBe(shown);
  });

  it("escapes head and layer labels and SVG titles, never a right-to-left override", () => {
    expect(headLabel(["abc\u202eexe.txt"], 0)).toBe("abc\\u202eexe.txt");
    expect(layerLabel(["\u2067L0"], 0)).toBe("\\u2067L0");
    expect(headLabel([], 3)).toBe("H3");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svgTitle(document, svg, "map \u202egnp.exe per head");
    expect(svg.textContent).toBe("map \\u202egnp.exe per head");
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
