// What a node selection means for the graph's other traits (pure functions over the node columns).

import type { GraphNodes } from "../../lib/graphview";

/** The traits a click on node `i` sets: the node, a head's (layer, head), its token, a feature of the linked site. */
export function selectionOf(nodes: GraphNodes, i: number, site: { nTokens: number; layer: number; nFeatures: number }): Record<string, number> {
  const kind = nodes.kind[i] ?? "";
  const [layer, index, pos] = [nodes.layer[i] as number, nodes.index[i] as number, nodes.pos[i] as number];
  const patch: Record<string, number> = { selected_node: i };
  if (kind.startsWith("head")) Object.assign(patch, { selected_layer: layer, selected_head: index });
  if (pos >= 0 && pos < site.nTokens) patch.selected_dest = pos;
  if (kind === "feature" && layer === site.layer && index < site.nFeatures) patch.selected_feature = index;
  return patch;
}

/** The node of feature `f` of `layer` to select (the most influential), or -1 when the selection `sel` is one or none exists. */
export function nodeOfFeature(nodes: GraphNodes, influence: ArrayLike<number>, layer: number, f: number, sel: number): number {
  const { kind, index } = nodes;
  if (f < 0 || (kind[sel] === "feature" && nodes.layer[sel] === layer && index[sel] === f)) return -1;
  let best = -1;
  kind.forEach((k, i) => {
    if (k === "feature" && nodes.layer[i] === layer && index[i] === f && (best < 0 || (influence[i] as number) > (influence[best] as number))) best = i;
  });
  return best;
}
