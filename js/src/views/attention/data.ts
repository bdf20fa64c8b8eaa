// The attention view's traits and the data read from them: dense patterns
// (./source.ts) or a long context's overview and tiles (./long.ts).

import type { AnyModel } from "@anywidget/types";
import { decodeArray, decodeOptional, type WireArray } from "../../lib/arrays";
import { type Patterns, toPatterns } from "../../lib/patterns";
import { LongSource } from "./long";
import { denseSource, type PatternSource, perPosition } from "./source";

export interface Diagonal {
  offset: number;
  label: string;
}

export interface AttentionTraits {
  [key: string]: unknown;
  tokens: string[];
  patterns: WireArray;
  causal: boolean;
  value_patterns: WireArray | null;
  value_norms: WireArray | null;
  logit_effect: WireArray | null;
  pattern_kind: string;
  show_diagonals: boolean;
  diagonals: Diagonal[];
  selected_layer: number;
  selected_head: number;
  selected_dest: number;
  selected_src: number;
  tile_block?: number;
  tile_size?: number;
  overview?: WireArray | null;
  top_sources?: WireArray | null;
  top_weights?: WireArray | null;
}

export type Model = AnyModel<AttentionTraits>;

export interface Data {
  tokens: string[];
  raw: PatternSource;
  value: PatternSource | null;
  /** Dense patterns (for streamed heads), null for long contexts. */
  dense: { raw: Patterns; value: Patterns | null } | null;
  long: LongSource | null;
  norms: Float32Array | null;
  effect: Float32Array | null;
}

/** Read the traits into the view's data (throws on data that does not fit). */
export function loadData(model: Model, offline: boolean, previous: Data | null = null): Data {
  const tokens = model.get("tokens") ?? [];
  const causal = Boolean(model.get("causal"));
  const block = Number(model.get("tile_block") ?? 0);
  if (block > 0) {
    const shape = decodeArray(model.get("patterns")).shape;
    const [nLayers = 0, nHeads = 0] = shape;
    const long = new LongSource(
      { nLayers, nHeads, nTokens: tokens.length, causal, block, tileSize: Number(model.get("tile_size") ?? 64) },
      model.get("overview") ?? null,
      model.get("top_sources") ?? null,
      model.get("top_weights") ?? null,
      (message) => model.send(message),
      offline,
      previous?.long ?? null,
    );
    return { tokens, raw: long, value: null, dense: null, long, norms: null, effect: null };
  }
  const raw = toPatterns(decodeArray(model.get("patterns")), tokens.length, causal);
  const valueWire = decodeOptional(model.get("value_patterns"));
  let value = valueWire === null ? null : toPatterns(valueWire, tokens.length, causal);
  if (value !== null && (value.nLayers !== raw.nLayers || value.nHeads !== raw.nHeads)) value = null;
  const per = (name: "value_norms" | "logit_effect") => perPosition(model.get(name), raw.nLayers, raw.nHeads, raw.nTokens);
  return {
    tokens,
    raw: denseSource(raw),
    value: value === null ? null : denseSource(value),
    dense: { raw, value },
    long: null,
    norms: per("value_norms"),
    effect: per("logit_effect"),
  };
}

