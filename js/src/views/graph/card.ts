// The graph view's hover card: a node's label, activation and influence and,
// for a feature with a dashboard, its top contexts (token windows with the
// window's own token marked, each with the feature's activation there). Every
// string is set as text (tokens through tokenSpan, which escapes invisible and
// bidi characters).

import type { NDArray } from "../../lib/arrays";
import { el } from "../../lib/dom";
import { fmt } from "../../lib/svg";
import { tokenSpan, visibleLabel } from "../../lib/tokens";

export interface Contexts {
  vocab: readonly string[];
  tokens: NDArray | null;
  value: NDArray | null;
  centre: number;
}

export interface CardNode {
  label: string;
  /** Its label (a feature's clerp), the token text at its position (shown as given: already made visible). */
  clerp?: string;
  token?: string | undefined;
  pos?: number;
  kind: string;
  activation: number;
  influence: number;
}

/** The contexts of node `i`: `[value, tokens]` per context shown (none without a dashboard). */
export function nodeContexts(c: Contexts, i: number): [number, string[]][] {
  const { tokens, value } = c;
  if (!tokens || !value || tokens.shape.length !== 3 || i >= (tokens.shape[0] ?? 0)) return [];
  const k = tokens.shape[1] ?? 0;
  const width = tokens.shape[2] ?? 0;
  const out: [number, string[]][] = [];
  for (let s = 0; s < k; s++) {
    const v = value.data[i * k + s] as number;
    if (!Number.isFinite(v)) break;
    const words: string[] = [];
    for (let j = 0; j < width; j++) {
      const t = tokens.data[(i * k + s) * width + j] as number;
      words.push(t < c.vocab.length ? (c.vocab[t] ?? "") : "");
    }
    out.push([v, words]);
  }
  return out;
}

/** The card of `node` (row `i`), or a hint when nothing is hovered. */
export function card(doc: Document, node: CardNode | null, i: number, c: Contexts): HTMLElement {
  const box = el(doc, "div", "cw-graph-card");
  if (node === null) {
    box.append(el(doc, "div", "cw-note", "Hover a node: its influence and, for a feature, its top contexts."));
    return box;
  }
  box.dataset.cwCard = String(i);
  box.append(el(doc, "div", "cw-graph-card-title", visibleLabel(node.label)));
  if (node.clerp) box.append(el(doc, "div", "cw-graph-card-clerp", visibleLabel(node.clerp)));
  if (node.token !== undefined) box.append(el(doc, "div", "cw-note", `at token “${node.token}” (position ${node.pos ?? "?"})`));
  const facts: string[] = [];
  if (Number.isFinite(node.activation)) facts.push(`${node.kind === "logit" ? "probability" : "activation"} ${fmt(node.activation, 3)}`);
  if (Number.isFinite(node.influence)) facts.push(`influence ${fmt(node.influence, 3)}`);
  if (facts.length) box.append(el(doc, "div", "cw-note", facts.join(", ")));
  const rows = nodeContexts(c, i);
  if (node.kind === "feature" && !rows.length) box.append(el(doc, "div", "cw-note", "No top contexts recorded for this feature."));
  for (const [v, words] of rows) {
    const line = el(doc, "div", "cw-graph-ctx");
    line.dataset.cwContext = "";
    line.append(el(doc, "span", "cw-graph-ctx-value", fmt(v, 2)));
    words.forEach((w, j) => {
      if (!w) return;
      line.append(tokenSpan(doc, w, j === c.centre ? "cw-token cw-graph-ctx-centre" : "cw-token"));
    });
    box.append(line);
  }
  return box;
}
