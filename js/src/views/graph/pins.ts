// The graph view's pin controls: pin or unpin the selected node, group the
// ungrouped pins under a label the user types, draw only the pinned subgraph,
// and the list of supernodes (each label as text, with a button to ungroup).

import { el } from "../../lib/dom";
import type { Supernode } from "../../lib/graphpins";
import type { Placed } from "../../lib/graphview";
import { svgEl, svgTitle } from "../../lib/svg";
import { visibleLabel } from "../../lib/tokens";
import { PIN } from "./side";

export interface PinControls {
  root: HTMLElement;
  pin: HTMLButtonElement;
  label: HTMLInputElement;
  group: HTMLButtonElement;
  only: HTMLInputElement;
}

/** The controls (wired by the view). */
export function pinControls(doc: Document): PinControls {
  const root = el(doc, "span", "cw-graph-pins");
  const pin = el(doc, "button", "cw-button", "Pin selected");
  pin.type = "button";
  pin.dataset.cwPin = "";
  pin.title = "Pin or unpin the selected node (or shift-click a node)";
  const label = el(doc, "input");
  label.type = "text";
  label.maxLength = 120;
  label.placeholder = "supernode label";
  label.dataset.cwGroupLabel = "";
  const group = el(doc, "button", "cw-button", "Group pins");
  group.type = "button";
  group.dataset.cwGroup = "";
  group.title = "Group the pinned nodes that are in no supernode yet under the label";
  const only = el(doc, "input");
  only.type = "checkbox";
  only.dataset.cwSubgraph = "";
  const onlyLabel = el(doc, "label", "cw-graph-only");
  onlyLabel.append(only, " pinned subgraph only");
  root.append(pin, label, group, onlyLabel);
  return { root, pin, label, group, only };
}

/** The supernodes as a list: label (text), member count and an ungroup button carrying `data-cw-ungroup`. */
export function groupList(doc: Document, groups: readonly Supernode[], nPinned: number, labels: readonly string[]): HTMLElement {
  const box = el(doc, "div", "cw-graph-groups");
  box.append(el(doc, "div", "cw-note", `${nPinned} pinned, ${groups.length} supernode${groups.length === 1 ? "" : "s"}`));
  groups.forEach((g, k) => {
    const row = el(doc, "div", "cw-graph-group");
    row.dataset.cwSupernode = String(k);
    const name = el(doc, "span", "cw-graph-group-label", visibleLabel(g.label));
    name.title = g.nodes.map((n) => visibleLabel(labels[n] ?? String(n))).join(", ");
    const drop = el(doc, "button", "cw-button", "ungroup");
    drop.type = "button";
    drop.dataset.cwUngroup = String(k);
    row.append(name, el(doc, "span", "cw-note", ` (${g.nodes.length}) `), drop);
    box.append(row);
  });
  return box;
}

/** Supernode `k` drawn as one node at `p`: a rounded box holding its label (as text, escaped). */
export function supernodeEl(doc: Document, g: Supernode, k: number, p: Placed, labels: readonly string[]): SVGGElement {
  const box = svgEl(doc, "g", { class: "cw-node cw-supernode", "data-cw-supernode-node": k });
  const text = visibleLabel(g.label);
  const chars = Array.from(text);
  const shown = chars.length > 26 ? `${chars.slice(0, 25).join("")}…` : text;
  const w = Math.min(170, 14 + 6 * Array.from(shown).length);
  box.append(svgEl(doc, "rect", { x: p.x - w / 2, y: p.y - 10, width: w, height: 20, rx: 8, fill: "#fdf2d9", stroke: PIN, "stroke-width": 2 }));
  box.append(svgEl(doc, "text", { x: p.x, y: p.y + 4, "text-anchor": "middle", "font-size": 10, fill: "#222", "pointer-events": "none" }, shown));
  svgTitle(doc, box, `${text}: ${g.nodes.map((i) => labels[i] ?? i).join(", ")}`);
  return box;
}
