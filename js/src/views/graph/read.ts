// The attribution graph's reading controls: the influence thresholds and the scores, a feature's label editor,
// the intervention panel (zero / ×2 / a value on the selected node or supernode; the target's change the graph
// predicts beside the one measured), and the text a node carries (a feature's label, a logit's token and
// probability). Every user string is set as text.

import { el } from "../../lib/dom";
import { clip } from "../../lib/graphread";
import type { Placed } from "../../lib/graphview";
import { fmt, svgEl } from "../../lib/svg";
import { visibleLabel, visibleToken } from "../../lib/tokens";

export interface ReadControls {
  root: HTMLElement;
  node: HTMLInputElement;
  edge: HTMLInputElement;
  nodeText: HTMLElement;
  edgeText: HTMLElement;
  scores: HTMLElement;
}

function slider(doc: Document, name: string): HTMLInputElement {
  const s = el(doc, "input");
  s.type = "range";
  s.min = "0.01";
  s.max = "1";
  s.step = "0.01";
  s.dataset.cwThreshold = name;
  return s;
}

/** Node and edge thresholds (cumulative influence kept) and the scores line. */
export function readControls(doc: Document): ReadControls {
  const root = el(doc, "span", "cw-graph-read");
  const node = slider(doc, "node");
  const edge = slider(doc, "edge");
  const nodeText = el(doc, "span", "cw-graph-read-value");
  const edgeText = el(doc, "span", "cw-graph-read-value");
  const a = el(doc, "label", "cw-size");
  a.title = "Keep the nodes that together carry this share of the influence on the target";
  a.append("Nodes: influence ", node, nodeText);
  const b = el(doc, "label", "cw-size");
  b.title = "Keep the edges that together carry this share of the edges' influence";
  b.append("Edges: influence ", edge, edgeText);
  const scores = el(doc, "span", "cw-graph-scores");
  scores.dataset.cwScores = "";
  root.append(a, b, scores);
  return { root, node, edge, nodeText, edgeText, scores };
}

/** The thresholds' positions and texts, and the scores. */
export function showThresholds(read: ReadControls, node: number, edge: number, drawn: number, scores: string): void {
  const pct = (v: number) => `${Math.round(v * 100)}%`;
  read.node.value = String(node);
  read.edge.value = String(edge);
  read.nodeText.textContent = ` ${pct(node)}`;
  read.edgeText.textContent = ` ${pct(edge)} (${drawn} edges)`;
  read.scores.textContent = scores;
}

export interface Result {
  key: string;
  rows: number[];
  mode: string;
  value: number;
  predicted: number;
  measured: number;
}

/** Results as sent by the kernel (malformed entries left out). */
export function parseResults(v: unknown): Result[] {
  if (!Array.isArray(v)) return [];
  return v.filter((r): r is Result => typeof r === "object" && r !== null && Array.isArray((r as Result).rows) && typeof (r as Result).predicted === "number");
}

const MODE_TEXT: Record<string, (v: number) => string> = { zero: () => "set to 0", times2: () => "×2", value: (v) => `set to ${fmt(v, 3)}` };

export interface SteerInput {
  /** Feature rows of the selection (a node, or a supernode's members). */
  rows: number[];
  /** What the selection is called. */
  name: string;
  live: boolean;
  results: Result[];
  labels: readonly string[];
  clerps: readonly string[];
  request: (mode: string, value: number) => void;
  rename: (text: string) => void;
}

/** The label editor and the intervention panel for the selection. */
export function steerPanel(doc: Document, s: SteerInput): HTMLElement {
  const box = el(doc, "div", "cw-graph-steer");
  box.dataset.cwSteer = "";
  if (s.rows.length === 1) {
    const edit = el(doc, "input");
    edit.type = "text";
    edit.maxLength = 120;
    edit.value = s.clerps[s.rows[0] as number] ?? "";
    edit.dataset.cwClerp = String(s.rows[0]);
    edit.title = "This feature's label (saved with the page and in the graph's JSON)";
    const save = () => s.rename(edit.value.slice(0, 120));
    edit.addEventListener("change", save);
    const row = el(doc, "label", "cw-graph-clerp");
    row.append("Label ", edit);
    box.append(row);
  }
  if (s.rows.length) {
    const head = el(doc, "div", "cw-graph-steer-head", `Intervene on ${visibleLabel(s.name)}:`);
    box.append(head);
    const buttons = el(doc, "div", "cw-graph-steer-buttons");
    const button = (text: string, mode: string, value: () => number) => {
      const b = el(doc, "button", "cw-button", text);
      b.type = "button";
      b.dataset.cwIntervene = mode;
      b.disabled = !s.live;
      b.addEventListener("click", () => s.request(mode, value()));
      buttons.append(b);
    };
    const input = el(doc, "input");
    input.type = "number";
    input.step = "0.1";
    input.value = "0";
    input.dataset.cwInterveneValue = "";
    input.disabled = !s.live;
    button("zero", "zero", () => 0);
    button("×2", "times2", () => 0);
    buttons.append(input);
    button("set", "value", () => (Number.isFinite(Number(input.value)) ? Number(input.value) : 0));
    box.append(buttons);
    if (!s.live) box.append(el(doc, "div", "cw-note", "Live interventions need the kernel; the pinned nodes' results below were computed before export."));
  }
  const mine = new Set(s.rows);
  const shown = s.results.filter((r) => r.rows.some((x) => mine.has(x)) || !s.rows.length);
  if (shown.length) {
    const table = el(doc, "table", "cw-graph-steer-table");
    const hr = el(doc, "tr");
    for (const h of ["nodes", "change", "graph predicts", "measured"]) hr.append(el(doc, "th", "", h));
    table.append(hr);
    for (const r of shown) {
      const tr = el(doc, "tr");
      tr.dataset.cwResult = r.key;
      const names = r.rows.map((i) => s.clerps[i] || s.labels[i] || String(i));
      tr.append(el(doc, "td", "", clip(names.map(visibleLabel).join(", "), 40)), el(doc, "td", "", (MODE_TEXT[r.mode] ?? (() => r.mode))(r.value)));
      tr.append(el(doc, "td", "cw-num", fmt(r.predicted, 3)), el(doc, "td", "cw-num", fmt(r.measured, 3)));
      table.append(tr);
    }
    box.append(table);
    box.append(el(doc, "div", "cw-note", "Change of the target: the graph's direct effect (attention, MLPs and norms frozen) beside the model run with attention frozen."));
  }
  return box;
}

/** The text a node carries: a feature's label under it; a logit's token and probability above it. */
export function nodeCaption(doc: Document, kind: string, p: Placed, clerp: string, label: string, activation: number, active: boolean): SVGTextElement | null {
  if (kind === "feature" && clerp) {
    return svgEl(doc, "text", { x: p.x, y: p.y + p.r + 10, "text-anchor": "middle", "font-size": 8.5, fill: active ? "#222" : "#aaa", "pointer-events": "none", class: "cw-node-label" }, clip(visibleLabel(clerp), 8));
  }
  if (kind === "logit") {
    const token = /^logit (['"])(.*)\1/u.exec(label)?.[2] ?? label.replace(/^logit /u, "");
    const t = svgEl(doc, "text", { x: p.x, y: p.y - p.r - 14, "text-anchor": "middle", "font-size": 9.5, fill: "#111", "pointer-events": "none", class: "cw-node-label" }, clip(visibleToken(token), 9));
    if (Number.isFinite(activation)) t.append(svgEl(doc, "tspan", { x: p.x, dy: 10, "font-size": 8.5, fill: "#555" }, `p=${fmt(activation, 2)}`));
    return t;
  }
  return null;
}

/**
 * A new selection on a drawn attribution graph, without drawing it again: the selected node's edges and their
 * other ends stay, the rest dims; the selected node's ring and its token's column follow (as a full draw does).
 */
export function highlightInPlace(plot: Element, sel: number, src: ArrayLike<number>, dst: ArrayLike<number>, pinned: ReadonlySet<number>, dest: number, pin: string): void {
  const near = new Set<number>([sel]);
  plot.querySelectorAll<SVGPathElement>(".cw-edge").forEach((p) => {
    const e = Number(p.dataset.cwEdge);
    const on = sel < 0 || src[e] === sel || dst[e] === sel;
    if (on && sel >= 0) near.add(src[e] as number).add(dst[e] as number);
    p.setAttribute("stroke-opacity", on ? "0.75" : "0.08");
    p.toggleAttribute("data-cw-dim", !on);
  });
  plot.querySelectorAll<SVGGElement>(".cw-node").forEach((g) => {
    const i = Number(g.dataset.cwNode);
    const dim = sel >= 0 && !near.has(i);
    if (dim) g.setAttribute("opacity", "0.3");
    else g.removeAttribute("opacity");
    g.toggleAttribute("data-cw-dim", dim);
    g.toggleAttribute("data-cw-selected", i === sel);
    const shape = g.querySelector("circle, rect");
    const ring = i === sel ? "#111" : pinned.has(i) ? pin : "#666";
    shape?.setAttribute("stroke", ring);
    shape?.setAttribute("stroke-width", i === sel || pinned.has(i) ? "2.5" : "1");
  });
  plot.querySelectorAll<SVGTextElement>("[data-cw-column]").forEach((t) => {
    const chosen = Number(t.getAttribute("data-cw-column")) === dest;
    t.setAttribute("fill", chosen ? "#111" : "#777");
    if (chosen) t.setAttribute("font-weight", "bold");
    else t.removeAttribute("font-weight");
  });
}
