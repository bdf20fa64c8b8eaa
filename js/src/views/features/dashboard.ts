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
import { lutCss, lutLuminance, signLegend } from "../../lib/colour";
import { el, listen } from "../../lib/dom";
import { type DashboardArrays, denseWords, type Example, histogramBars, rowOf, searchUnits, short, sig3, unitExamples } from "../../lib/features";
import { clearError, makePanel, runView, setTitle, showError } from "../../lib/panel";
import { ATTENTION, weightIndex } from "../../lib/shading";
import { indexOr, perFrame, setTraits } from "../../lib/selection";
import { svgEl, svgTitle } from "../../lib/svg";
import { compactToken, tokenLabel } from "../../lib/tokens";
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
  dense_share: number;
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
    const shown = compactToken(token, 24);
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
    // each hit is labelled by the token that matched the query (its top token, or the token it promotes)
    const head = el(doc, "div", "cw-note");
    head.textContent = hits.length === 0 ? `no unit's top token or promoted token contains "${tokenLabel(query, 24).text}"` : `${hits.length === 100 ? "first 100" : hits.length} units whose top token or a promoted token contains "${tokenLabel(query, 24).text}":`;
    results.append(head);
    for (const hit of hits) {
      const b = el(doc, "button", "cw-button cw-fd-hit");
      b.dataset.cwUnit = String(hit.unit);
      const shown = compactToken(hit.token, 14);
      b.dataset.cwMatched = hit.token;
      b.textContent = `${unitName(hit.unit)} ${hit.where === "top" ? "top" : "promotes"} '${shown.text}'`;
      b.title = `${unitName(hit.unit)}: ${hit.where === "top" ? "its top example's own token is" : "it promotes"} '${shown.title ?? shown.text}'`;
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
      const shown = compactToken(vocab[id] ?? "?", 16);
      t.textContent = shown.text;
      t.title = shown.title ?? shown.text;
      const v = el(doc, "span", "cw-fd-num");
      const value = values[i] ?? Number.NaN;
      v.textContent = `${value > 0 ? "+" : ""}${sig3(value)}`;
      v.classList.add(value < 0 ? "cw-negative" : "cw-positive"); // (the colour of the value's own sign)
      row.append(t, v);
      box.append(row);
    });
    return box;
  }

  /** The histogram of `u`'s positive activations: bars on log-spaced bins from its smallest bin to its largest
   * activation (the header's "largest"), a y-axis of token counts (0 and the tallest bar), both axes named. */
  function histogram(x: Arrays, u: number): SVGSVGElement {
    const largest = x.unit_max.data[u] as number;
    const bars = histogramBars(x.hist, x.hist_edges, u, largest);
    const W = 300;
    const H = 130;
    const L = 44; // (room for the y-axis' numbers)
    const plotH = H - 46;
    const svg = svgEl(doc, "svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "cw-fd-hist", role: "img" });
    svgTitle(doc, svg, `Histogram of ${unitName(u)}'s positive activations: tokens per log-spaced bin`);
    const max = Math.max(1, ...bars.map((b) => b.count));
    const bw = (W - L - 6) / Math.max(1, bars.length);
    bars.forEach((b, i) => {
      const h = (b.count / max) * plotH;
      const r = svgEl(doc, "rect", { x: L + i * bw, y: 8 + plotH - h, width: Math.max(1, bw - 1), height: h, fill: "#3484a5", "data-cw-count": b.count });
      svgTitle(doc, r, `activation ${sig3(b.lo)} to ${sig3(b.hi)}: ${b.count.toLocaleString("en-US")} tokens`);
      svg.append(r);
    });
    const axis = { stroke: "#888", "stroke-width": 1 };
    svg.append(svgEl(doc, "line", { x1: L - 2, y1: 8, x2: L - 2, y2: 8 + plotH, ...axis }), svgEl(doc, "line", { x1: L - 2, y1: 8 + plotH, x2: W - 6, y2: 8 + plotH, ...axis }));
    const text = (x0: number, y0: number, anchor: string, value: string, cls: string): SVGElement => svgEl(doc, "text", { x: x0, y: y0, "font-size": 10, fill: "#444", "text-anchor": anchor, class: cls }, value);
    svg.append(text(L - 5, 12, "end", max.toLocaleString("en-US"), "cw-fd-ymax"), text(L - 5, 8 + plotH, "end", "0", "cw-fd-y0"));
    svg.append(svgEl(doc, "text", { x: 10, y: 8 + plotH / 2, "font-size": 10, fill: "#444", "text-anchor": "middle", transform: `rotate(-90 10 ${8 + plotH / 2})` }, "tokens"));
    if (bars.length > 0) {
      svg.append(text(L, 8 + plotH + 13, "start", sig3(bars[0]?.lo ?? 0), "cw-fd-xmin"), text(W - 6, 8 + plotH + 13, "end", sig3(bars[bars.length - 1]?.hi ?? 0), "cw-fd-xmax"));
    }
    svg.append(text((L + W) / 2, H - 4, "middle", "activation (log-spaced bins)", "cw-fd-xlabel"));
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
    const density = x.density.data[u] as number;
    const read = int(m.get("n_tokens_read")).toLocaleString("en-US");
    const dead = top.length === 0 || !(density > 0);
    const stats = el(doc, "div", "cw-fd-stats");
    const parts: HTMLElement[] = [stats];
    if (dead) {
      // a unit that never fired: say so, and draw no empty examples or histogram
      stats.textContent = `${unitName(u)} never fires on the ${read} tokens read (no positive activation)`;
      stats.classList.add("cw-fd-dead");
      left.replaceChildren(Object.assign(el(doc, "div", "cw-note cw-fd-dead-note"), { textContent: `${unitName(u)} never fires on the ${read} tokens read: no examples, no histogram.` }));
    } else {
      const h1 = el(doc, "div", "cw-fd-heading");
      h1.textContent = `${unitName(u)}: top activations (activation at the outlined token)`;
      const lines: HTMLElement[] = [h1, ...top.map((ex, i) => exampleLine(doc, ex, sig3(ex.value), i))];
      if (sample.length > 0) {
        const h2 = el(doc, "div", "cw-fd-heading");
        h2.textContent = "random sample of its active tokens (activation · quantile among them)";
        lines.push(h2, ...sample.map((ex, i) => exampleLine(doc, ex, `${sig3(ex.value)} · q${Math.round(ex.quantile * 100)}`, nTop + i)));
      }
      left.replaceChildren(...lines);
      stats.textContent = `active on ${sig3(density * 100)}% of ${read} tokens · largest activation ${sig3(x.unit_max.data[u] as number)}`;
      parts.push(histogram(x, u) as unknown as HTMLElement);
    }
    const share = Number(m.get("dense_share") ?? 0);
    if (share > 0 && density > share) {
      const badge = el(doc, "div", "cw-fd-dense");
      badge.textContent = `dense: ${denseWords(share)} (it fires on many tokens, so its presence says little about any one of them)`;
      parts.splice(1, 0, badge);
    }
    if ((x.logit_up.shape[1] ?? 0) > 0) {
      const lists = el(doc, "div", "cw-fd-lists");
      lists.append(
        tokenList("promotes", rowOf(x.logit_up, u), rowOf(x.logit_up_value, u), vocab, "cw-fd-up"),
        tokenList("suppresses", rowOf(x.logit_down, u), rowOf(x.logit_down_value, u), vocab, "cw-fd-down"),
      );
      const unit = el(doc, "div", "cw-note cw-fd-unit");
      unit.textContent = `logit change per unit of activation (through the final norm at its mean scale), 3 significant figures; ${signLegend("raises the token's logit", "lowers it")}`;
      unit.classList.add("cw-sign-legend");
      parts.push(lists, unit);
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
        b.title = `cosine of ${unitName(v)}'s output direction with ${unitName(u)}'s: ${sig3(cos[i] ?? Number.NaN)}`;
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
  return runView(m, panel, frame, cleanups, { data: [...ARRAYS], redraw: ["vocab", "n_top", "centre", "site", "unit_prefix", "kind", "model_name", "n_tokens_read", "dense_share", "selected_feature"] }, load, draw);
}
