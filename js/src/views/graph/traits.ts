// The AttributionGraph view's traits (kernel → view data; view → kernel settings).

import type { WireArray } from "../../lib/arrays";
import type { Supernode } from "../../lib/graphpins";

export interface GraphTraits {
  [key: string]: unknown;
  node_kind: string[];
  node_label: string[];
  node_layer: WireArray;
  node_pos: WireArray;
  node_index: WireArray;
  edge_src: WireArray;
  edge_dst: WireArray;
  edge_weight: WireArray;
  prompt: string[];
  curve_edges: number[];
  curve_values: number[];
  curve_note: string;
  title: string;
  metric: string;
  caption: string;
  negative_note: string;
  positive_note: string;
  model_name: string;
  size: number;
  selected_node: number;
  selected_layer: number;
  selected_head: number;
  selected_feature: number;
  selected_dest: number;
  pinned: number[];
  supernodes: Supernode[];
  subgraph_only: boolean;
  node_share: WireArray;
  edge_share: WireArray;
  scores_line: string;
  can_intervene: boolean;
  node_threshold: number;
  edge_threshold: number;
  node_clerp: string[];
  intervention_request: Record<string, unknown>;
  interventions: unknown[];
}
