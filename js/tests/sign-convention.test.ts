// @vitest-environment happy-dom
// One colour convention for signed quantities in every view (docs/style.md): positive red, negative blue, the
// ends of the diverging scale, and every legend of a signed quantity in the same words (SIGN_WORDS).
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DIVERGING, NEGATIVE, POSITIVE, SIGN_WORDS, signColour, signLegend } from "../src/lib/colour";
import { edgeColour } from "../src/lib/graphview";
import { legend } from "../src/views/graph/side";

const SRC = join(__dirname, "..", "src");

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : /\.(ts|css)$/.test(name) ? [path] : [];
  });
}

const hex = (h: string): [number, number, number] => [1, 3, 5].map((i) => Number.parseInt(h.slice(i, i + 2), 16)) as [number, number, number];

describe("the sign convention", () => {
  it("is the diverging scale's: positive red at its top, negative blue at its bottom", () => {
    const [pr, , pb] = hex(POSITIVE);
    const [nr, , nb] = hex(NEGATIVE);
    expect(pr).toBeGreaterThan(pb);
    expect(nb).toBeGreaterThan(nr);
    expect(DIVERGING[230 * 4]).toBeGreaterThan(DIVERGING[230 * 4 + 2] as number); // (high values red)
    expect(DIVERGING[25 * 4 + 2]).toBeGreaterThan(DIVERGING[25 * 4] as number); // (low values blue)
    expect([signColour(2), signColour(-2), edgeColour(0.5), edgeColour(-0.5)]).toEqual([POSITIVE, NEGATIVE, POSITIVE, NEGATIVE]);
    expect(signLegend("raises it", "lowers it")).toBe("red: positive, raises it · blue: negative, lowers it");
  });

  it("is what the graph's legend draws and says", () => {
    const svg = legend(document, 1, "removing it lowers the metric", "removing it raises the metric", false);
    const lines = Array.from(svg.querySelectorAll("line")).slice(0, 2).map((l) => l.getAttribute("stroke"));
    const words = Array.from(svg.querySelectorAll(".cw-sign-legend")).map((t) => t.textContent);
    expect(lines).toEqual([POSITIVE, NEGATIVE]);
    expect(words).toEqual([`${SIGN_WORDS.positive}, removing it raises the metric`, `${SIGN_WORDS.negative}, removing it lowers the metric`]);
  });

  it("is the only way a view's source pairs a colour with a sign", () => {
    // a colour word beside a sign or its meaning, written out by hand instead of through SIGN_WORDS / signLegend
    const pairing = /\b(blue|red|orange|vermill?ion)\b[\s:,]*\b(positive|negative|lowers|raises|promotes|suppresses)\b|\b(positive|negative|lowers|raises)\b[\s:,(]*\b(blue|red|orange|vermill?ion)\b/i;
    const offenders = files(SRC)
      .filter((f) => !f.endsWith(join("lib", "colour.ts")))
      .flatMap((f) => readFileSync(f, "utf8").split("\n").map((line, i) => [f, i + 1, line] as const))
      .filter(([, , line]) => pairing.test(line))
      .map(([f, i, line]) => `${f}:${i}: ${line.trim()}`);
    expect(offenders).toEqual([]);
  });

  it("colours the dashboard's signed numbers with the same two colours", () => {
    const css = readFileSync(join(SRC, "styles", "features.css"), "utf8");
    expect(css).toContain(`.cw-fd-num.cw-positive { color: ${POSITIVE}; }`);
    expect(css).toContain(`.cw-fd-num.cw-negative { color: ${NEGATIVE}; }`);
  });
});
