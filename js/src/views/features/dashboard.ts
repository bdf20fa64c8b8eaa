// FeatureDashboard view: one unit (feature, neuron, head) of a layer at a time.
//
// Kernel → view: vocab, ctx_tokens [units, examples, width] (indices into
// vocab), ctx_shade (uint8), ex_value, ex_quantile, n_top, centre, unit_max,
// density, hist [units, bins] + hist_edges, logit_up/down (+ _value), nearby
// (+ nearby_cos), site, unit_prefix, kind, model_name, n_tokens_read.
// View → kernel: selected_feature (the picker, the search results, a nearby unit).
// Token strings are untrusted: every one is written as text through tokenLabel.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type NDArray, type WireArray } from "../../lib/arrays";
import { lutCss, lutLuminance } from "../../lib/colour";
import { el, listen } from "../../lib/dom";
import { type DashboardArrays, type Example, histogramBars, rowOf, searchUnits, short, unitExamples } from "../../lib/features";
import { clearError, makePanel, runView, setTitle, showError } from "../../lib/panel";
import { ATTENTION, weightIndex } from "../../lib/shading";
import { indexOr, perFrame, setTraits } from "../../lib/selection";
import { svgEl, svgTitle } from "../../lib/svg";
import { tokenLabel } from "../../lib/tokens";
import "../../styles/features.css";

export interface FeatureDashboardTraits {
  [key: string]: unknown;
  vocab: string[];
  ctx_tokens: WireArray;
  ctx_shade: WireArray;
  ex_value: WireArray;
  ex_quantile: WireArray;
  n_top: number;
  centre: number;
  unit_max: WireArray;
  density: WireArray;
  hist: WireArray;
  hist_edges: WireArray;
  logit_up: WireArray;
  logit_up_value: WireArray;
  logit_down: WireArray;
  logit_down_value: WireArray;
  nearby: WireArray;
  nearby_cos: WireArray;
  site: string;
  unit_prefix: string;
  kind: string;
  model_name: string;
  n_tokens_read: number;
  selected_feature: number;
}

type Model = AnyModel<FeatureDashboardTraits>;
const ARRAYS = ["ctx_tokens", "ctx_shade", "ex_value", "ex_quantile", "unit_max", "density", "hist", "hist_edges", "logit_up", "logit_up_value", "logit_down", "logit_down_value", "nearby", "nearby_cos"] as const;
type Arrays = Record<(typeof ARRAYS)[number], NDArray>;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map((s) => String(s)) : []);
const int = (v: unknown, fallback = 0): number => (typeof v === "number" && Number.isInteger(v) ? v : fallback);

/** One example as a line of token spans shaded by the unit's activation; the example's own token outlined. */
function exampleLine(doc: Document, ex: Example, label: string, row: number): HTMLDivElement {
  const line = el(doc, "div", "cw-fd-example");
  line.dataset.cwRow = String(row);
  const value = el(doc, "span", "cw-fd-value");
  value.textContent = label;
  const text = el(doc, "span", "cw-fd-text");
  ex.tokens.forEach((token, i) => {
    const span = el(doc, "span", i === ex.centre ? "cw-token cw-fd-centre" : "cw-token");
    const shown = tokenLabel(token, 24);
    span.textContent = shown.text;
    const idx = weightIndex(ex.shades[i] ?? 0);
    if (idx >= 0) {
      span.style.background = lutCss(ATTENTION, idx);
      span.style.color = lutLuminance(ATTENTION, idx) > 0.45 ? "#111" : "#fff";
    }
    span.title = `${shown.title ?? shown.text} · ${Math.round((ex.shades[i] ?? 0) * 100)}% of the unit's largest`;
    text.append(span);
  });
  line.append(value, text);
  return line;
}

export function renderFeatureDashboard({ model, el: root }: RenderProps<FeatureDashboardTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  let a: Arrays | null = null;
  let query = "";
  const panel = makePanel(root, "featuredashboard", "cw-featuredashboard", () => `${String(m.get("unit_prefix") ?? "")}${int(m.get("selected_feature"))}`);
  const cleanups: (() => void)[] = [];
  // picker: arrows, a unit number, a search by token
  const prev = el(doc, "button", "cw-button");
  prev.textContent = "◀";
  prev.title = "previous unit";
  const next = el(doc, "button", "cw-button");
  next.textContent = "▶";
  next.title = "next unit";
  const number = el(doc, "input", "cw-fd-number");
  number.type = "number";
  number.min = "0";
  number.setAttribute("aria-label", "unit number");
  const search = el(doc, "input", "cw-fd-search");
  search.type = "search";
  search.placeholder = "search by token…";
  search.setAttribute("aria-label", "search units by token");
  const results = el(doc, "div", "cw-fd-results");
  panel.controls.append(prev, number, next, search);
  const left = el(doc, "div", "cw-fd-left");
  const right = el(doc, "div", "cw-fd-right");
  const grid = el(doc, "div", "cw-fd-grid");
  grid.append(left, right);
  panel.body.append(results, grid);

  function load(): void {
    try {
      const decoded = Object.fromEntries(ARRAYS.map((k) => [k, decodeArray(m.get(k) as WireArray)])) as Arrays;
      const [u, e, w] = decoded.ctx_tokens.shape;
      if (decoded.ctx_tokens.shape.length !== 3 || decoded.ctx_shade.shape.join() !== [u, e, w].join()) throw new Error("circuitwidgets: ctx_tokens and ctx_shade must be [units, examples, width] alike");
      a = decoded;
      clearError(panel);
    } catch (err) {
      a = null;
      showError(panel, err);
    }
  }

  const nUnits = (): number => a?.ctx_tokens.shape[0] ?? 0;
  const unitName = (u: number): string => `${String(m.get("unit_prefix") ?? "")}${u}`;
  const selected = (): number => indexOr(m.get("selected_feature"), nUnits(), 0);
  const select = (u: number): void => {
    if (u < 0 || u >= nUnits()) return;
    setTraits(m, { selected_feature: u });
    frame.schedule();
  };
  const dashArrays = (x: Arrays): DashboardArrays => ({ ctxTokens: x.ctx_tokens, ctxShade: x.ctx_shade, exValue: x.ex_value, exQuantile: x.ex_quantile });

  function drawResults(x: Arrays, vocab: string[]): void {
    results.replaceChildren();
    if (query === "") return;
    const hits = searchUnits(query, dashArrays(x), x.logit_up, vocab, int(m.get("centre")));
    const head = el(doc, "div", "cw-note");
    head.textContent = hits.length === 0 ? `no unit's top token or promoted token contains "${tokenLabel(query, 24).text}"` : `${hits.length === 100 ? "first 100" : hits.length} units whose top token or a promoted token contains "${tokenLabel(query, 24).text}":`;
    results.append(head);
    for (const u of hits) {
      const b = el(doc, "button", "cw-button cw-fd-hit");
      b.dataset.cwUnit = String(u);
      const top = unitExamples(dashArrays(x), vocab, u, 0, 1, int(m.get("centre")))[0];
      b.textContent = `${unitName(u)} ${top ? `'${tokenLabel(top.tokens[top.centre] ?? "", 10).text}'` : ""}`;
      results.append(b);
    }
  }

  function tokenList(title: string, ids: number[], values: number[], vocab: string[], cls: string): HTMLDivElement {
    const box = el(doc, "div", `cw-fd-logits ${cls}`);
    const h = el(doc, "div", "cw-fd-heading");
    h.textContent = title;
    box.append(h);
    ids.forEach((id, i) => {
      const row = el(doc, "div", "cw-fd-logit");
      const t = el(doc, "span", "cw-token");
      t.textContent = tokenLabel(vocab[id] ?? "?", 20).text;
      const v = el(doc, "span", "cw-fd-num");
      v.textContent = short(values[i] ?? Number.NaN);
      row.append(t, v);
      box.append(row);
    });
    return box;
  }

  function histogram(x: Arrays, u: number): SVGSVGElement {
    const bars = histogramBars(x.hist, x.hist_edges, u);
    const W = 300;
    const H = 110;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-fd-hist", role: "img" });
    svgTitle(doc, svg, `Histogram of ${unitName(u)}'s positive activations (log-spaced bins)`);
    const max = Math.max(1, ...bars.map((b) => b.count));
    const bw = (W - 20) / Math.max(1, bars.length);
    bars.forEach((b, i) => {
      const h = (b.count / max) * (H - 30);
      const r = svgEl(doc, "rect", { x: 10 + i * bw, y: H - 20 - h, width: Math.max(1, bw - 1), height: h, fill: "#3484a5", "data-cw-count": b.count });
      svgTitle(doc, r, `${short(b.lo)} to ${short(b.hi)}: ${b.count.toLocaleString("en-US")} tokens`);
      svg.append(r);
    });
    if (bars.length > 0) {
      svg.append(svgEl(doc, "text", { x: 10, y: H - 6, "font-size": 10, fill: "#444" }, short(bars[0]?.lo ?? 0)));
      svg.append(svgEl(doc, "text", { x: W - 10, y: H - 6, "font-size": 10, fill: "#444", "text-anchor": "end" }, short(bars[bars.length - 1]?.hi ?? 0)));
    }
    return svg;
  }

  function draw(): void {
    const kind = String(m.get("kind") ?? "unit");
    setTitle(panel, "Feature dashboard", `${String(m.get("site") ?? "")} · ${String(m.get("model_name") ?? "")}`);
    const x = a;
    const n = nUnits();
    if (x === null || n === 0) {
      left.replaceChildren();
      right.replaceChildren();
      return;
    }
    const vocab = strings(m.get("vocab"));
    const centre = int(m.get("centre"));
    const nTop = int(m.get("n_top"));
    const u = selected();
    number.max = String(n - 1);
    if (doc.activeElement !== number) number.value = String(u);
    drawResults(x, vocab);
    const top = unitExamples(dashArrays(x), vocab, u, 0, nTop, centre);
    const sample = unitExamples(dashArrays(x), vocab, u, nTop, Number.MAX_SAFE_INTEGER, centre);
    const h1 = el(doc, "div", "cw-fd-heading");
    h1.textContent = `${unitName(u)}: top activations`;
    const h2 = el(doc, "div", "cw-fd-heading");
    h2.textContent = "random sample of its active tokens (quantile among them)";
    left.replaceChildren(h1, ...top.map((ex, i) => exampleLine(doc, ex, short(ex.value), i)), h2, ...sample.map((ex, i) => exampleLine(doc, ex, `${short(ex.value)} · q${Math.round(ex.quantile * 100)}`, nTop + i)));
    if (top.length === 0) left.append(Object.assign(el(doc, "div", "cw-note"), { textContent: "never active on the corpus read" }));
    const density = x.density.data[u] as number;
    const stats = el(doc, "div", "cw-fd-stats");
    stats.textContent = `active on ${(density * 100).toPrecision(3)}% of ${int(m.get("n_tokens_read")).toLocaleString("en-US")} tokens · largest ${short(x.unit_max.data[u] as number)}`;
    const parts: HTMLElement[] = [stats, histogram(x, u) as unknown as HTMLElement];
    if ((x.logit_up.shape[1] ?? 0) > 0) {
      const lists = el(doc, "div", "cw-fd-lists");
      lists.append(
        tokenList("promotes", rowOf(x.logit_up, u), rowOf(x.logit_up_value, u), vocab, "cw-fd-up"),
        tokenList("suppresses", rowOf(x.logit_down, u), rowOf(x.logit_down_value, u), vocab, "cw-fd-down"),
      );
      parts.push(lists);
    }
    if ((x.nearby.shape[1] ?? 0) > 0) {
      const near = el(doc, "div", "cw-fd-nearby");
      const h = el(doc, "div", "cw-fd-heading");
      h.textContent = "nearby (decoder cosine)";
      near.append(h);
      const cos = rowOf(x.nearby_cos, u);
      rowOf(x.nearby, u).forEach((v, i) => {
        const b = el(doc, "button", "cw-button cw-fd-near");
        b.dataset.cwUnit = String(v);
        b.textContent = `${unitName(v)} ${short(cos[i] ?? Number.NaN)}`;
        near.append(b);
      });
      parts.push(near);
    }
    right.replaceChildren(...parts);
    panel.status.textContent = `${kind} ${unitName(u)} of ${n.toLocaleString("en-US")} selected; arrows, a number or a token search pick another`;
  }

  const frame = perFrame(draw);
  cleanups.push(
    listen(prev, "click", () => select(selected() - 1)),
    listen(next, "click", () => select(selected() + 1)),
    listen(number, "change", () => select(Number.parseInt(number.value, 10))),
    listen(search, "input", () => {
      query = search.value;
      frame.schedule();
    }),
    listen(root, "click", (event) => {
      const b = (event.target as Element | null)?.closest?.("[data-cw-unit]");
      if (b) select(Number(b.getAttribute("data-cw-unit")));
    }),
  );
  return runView(m, panel, frame, cleanups, { data: [...ARRAYS], redraw: ["vocab", "n_top", "centre", "site", "unit_prefix", "kind", "model_name", "n_tokens_read", "selected_feature"] }, load, draw);
}
