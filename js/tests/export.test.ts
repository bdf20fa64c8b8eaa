// @vitest-environment happy-dom
import { afterEach, describe, expect, it, vi } from "vitest";
import { DOWNLOAD_GAP_MS, download, exportName, exportToolbar, NO_EXPORT, noExport, snapshotSvg, withoutControls } from "../src/lib/export";

const rect = (left: number, top: number, width: number, height: number) =>
  ({ left, top, width, height, right: left + width, bottom: top + height, x: left, y: top, toJSON() {} }) as DOMRect;

afterEach(() => document.body.replaceChildren());

describe("export", () => {
  it("names files from the view and the selection, safely", () => {
    expect(exportName("eigen", "L1H2", "svg")).toBe("circuitwidgets-eigen-L1H2.svg");
    expect(exportName("skiptrigrams", "../<x>", "png")).toBe("circuitwidgets-skiptrigrams-x.png");
    expect(exportName("composition", "", "png")).toBe("circuitwidgets-composition.png");
  });

  it("writes token text as escaped SVG text nodes and leaves the toolbar out", () => {
    const root = document.createElement("div");
    const token = document.createElement("span");
    token.textContent = '<script>alert(1)</script> & "q"';
    const bar = document.createElement("div");
    bar.setAttribute(NO_EXPORT, "");
    bar.textContent = "SVG PNG";
    root.append(token, bar);
    document.body.append(root);
    const proto = Range.prototype as unknown as { getClientRects: () => DOMRect[] };
    const saved = proto.getClientRects;
    proto.getClientRects = () => [rect(0, 0, 50, 12)];
    root.getBoundingClientRect = () => rect(0, 0, 200, 40);
    token.getBoundingClientRect = () => rect(0, 0, 50, 12);
    try {
      const svg = snapshotSvg(root);
      expect(svg).toContain("&lt;script&gt;alert(1)&lt;/script&gt; &amp; \"q\"");
      expect(svg).not.toContain("<script");
      expect(svg).not.toContain("SVG PNG");
      const doc = new DOMParser().parseFromString(svg.replace(/^<\?xml[^>]*>\n/, ""), "image/svg+xml");
      expect(doc.querySelector("text")?.textContent).toBe('<script>alert(1)</script> & "q"');
    } finally {
      proto.getClientRects = saved;
    }
  });

  it("offers SVG and PNG buttons marked for browser tests", () => {
    const target = document.createElement("div");
    const { element, cleanup } = exportToolbar(document, "eigen", () => target);
    expect([...element.querySelectorAll("[data-cw-export]")].map((b) => b.getAttribute("data-cw-export"))).toEqual(["svg", "png"]);
    const scale = element.querySelector<HTMLSelectElement>("[data-cw-export-scale]");
    expect([...(scale?.options ?? [])].map((o) => o.value)).toEqual(["1", "2", "3"]);
    expect(element.hasAttribute(NO_EXPORT)).toBe(true);
    cleanup();
  });
});

describe("downloads", () => {
  it("start at once, and a burst is spaced so that Chromium's 10-per-second throttle drops none", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "performance"] });
    const clicked: { name: string; at: number }[] = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(function (this: HTMLAnchorElement) {
      clicked.push({ name: this.download, at: performance.now() });
    });
    try {
      const doc = document.implementation.createHTMLDocument("burst");
      for (let i = 0; i < 25; i++) download(doc, new Blob([`<svg>${i}</svg>`]), `v${i}.svg`);
      expect(clicked.map((c) => c.name)).toEqual(["v0.svg"]); // the first in the click's own task
      vi.advanceTimersByTime(25 * DOWNLOAD_GAP_MS);
      expect(clicked.map((c) => c.name)).toEqual(Array.from({ length: 25 }, (_, i) => `v${i}.svg`));
      const gaps = clicked.slice(1).map((c, i) => c.at - (clicked[i]?.at ?? 0));
      expect(Math.min(...gaps)).toBeGreaterThanOrEqual(DOWNLOAD_GAP_MS);
      // Chromium's rule: once 10 have started, an 11th within 1 s of the burst's first is dropped
      for (let i = 10; i < clicked.length; i++) expect((clicked[i]?.at ?? 0) - (clicked[i - 10]?.at ?? 0)).toBeGreaterThan(1000);
      expect(doc.querySelectorAll("a").length).toBe(0); // each link removed after its click
      vi.advanceTimersByTime(60_000);
      download(document, new Blob(["x"]), "alone.svg"); // another document, and a quiet one: at once
      expect(clicked.at(-1)?.name).toBe("alone.svg");
    } finally {
      click.mockRestore();
      vi.useRealTimers();
    }
  });
});

describe("gradients", () => {
  it("reads CSS linear gradients as colour stops", async () => {
    const { parseLinearGradient } = await import("../src/lib/export");
    expect(parseLinearGradient("linear-gradient(to right, rgb(1, 2, 3) 0%, rgb(4, 5, 6) 100%)")).toEqual({
      vertical: false,
      stops: [
        { colour: "rgb(1, 2, 3)", offset: 0 },
        { colour: "rgb(4, 5, 6)", offset: 1 },
      ],
    });
    expect(parseLinearGradient("linear-gradient(to bottom, red, blue)")?.vertical).toBe(true);
    expect(parseLinearGradient("url(x.png)")).toBeNull();
  });
});

describe("the figure alone", () => {
  it("takes controls out of the layout while the snapshot is taken, then puts them back as they were", () => {
    const root = document.createElement("div");
    const controls = noExport(document.createElement("div"));
    const hint = noExport(document.createElement("span"));
    hint.style.display = "inline-block";
    const plot = document.createElement("div");
    root.append(controls, plot, hint);
    document.body.append(root);
    const during = withoutControls(root, () => [controls.style.display, hint.style.display, plot.style.display]);
    expect(during).toEqual(["none", "none", ""]);
    expect(controls.style.display).toBe("");
    expect(hint.style.display).toBe("inline-block");
    expect(() => withoutControls(root, () => { throw new Error("boom"); })).toThrow("boom");
    expect(hint.style.display).toBe("inline-block");
  });
});
