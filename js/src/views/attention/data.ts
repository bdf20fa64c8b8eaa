// The attention view's traits and the data read from them: dense patterns
// (./source.ts), one prompt of a batch (read in place from the padded
// arrays, lib/patterns.ts), or a long context's overview and tiles (./long.ts).

import type { AnyModel } from "@anywidget/types";
import { decodeArray, decodeOptional, type WireArray } from "../../lib/arrays";
import { type Patterns, promptPatterns, toPatterns } from "../../lib/patterns";
import { indexOr } from "../../lib/selection";
import { LongSource } from "./long";
import { denseSource, type PatternSource, perPosition, promptPositions } from "./source";
import { perTokenLoss } from "./strip";

export interface Diagonal {
  offset: number;
  label: string;
}

export interface AttentionTraits {
  [key: string]: unknown;
  prompts?: string[][];
  selected_prompt?: number;
  windows?: { size?: number; stride?: number; starts?: number[] };
  tokens: string[];
  patterns: WireArray;
  causal: boolean;
  value_patterns: WireArray | null;
  value_norms: WireArray | null;
  logit_effect: WireArray | null;
  /** The model's loss predicting the next token, `[n]` (a batch: `[n_prompts, width]`), or null. */
  per_token_loss?: WireArray | null;
  pattern_kind: string;
  /** What the strip shows: "logit_effect" or "loss" (./strip.ts). */
  strip?: string;
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
  /** Per position `[n]` (the shown prompt's), or null. */
  loss: Float32Array | null;
  /** A batch of prompts (null for one text): the shown one is `index`. */
  batch: Batch | null;
}

export interface Batch {
  index: number;
  prompts: string[][];
  /** Tokens the arrays are padded to (the longest prompt's). */
  width: number;
  /** Prompt `prompt`'s pattern of a kind, read in place (null when there is none of that kind). */
  source(prompt: number, kind: "raw" | "value"): PatternSource | null;
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
    const per = (name: "value_norms" | "logit_effect") => perPosition(model.get(name), nLayers, nHeads, tokens.length);
    const loss = perTokenLoss(model.get("per_token_loss"), tokens.length);
    return { tokens, raw: long, value: long.withKind("value"), dense: null, long, norms: per("value_norms"), effect: per("logit_effect"), loss, batch: null };
  }
  const prompts = model.get("prompts") ?? [];
  if (prompts.length > 0) return loadBatch(model, prompts, causal);
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
    loss: perTokenLoss(model.get("per_token_loss"), raw.nTokens),
    batch: null,
  };
}

/** The shown prompt of a batch (traits laid out as in `circuitwidgets.widgets.attention.batch`). */
function loadBatch(model: Model, prompts: string[][], causal: boolean): Data {
  const index = indexOr(model.get("selected_prompt"), prompts.length, 0);
  const width = Math.max(...prompts.map((t) => t.length));
  const wires = { raw: decodeArray(model.get("patterns")), value: decodeOptional(model.get("value_patterns")) };
  const cache = new Map<string, { patterns: Patterns; source: PatternSource }>();
  const read = (prompt: number, kind: "raw" | "value") => {
    const wire = wires[kind];
    const tokens = prompts[prompt];
    if (wire === null || tokens === undefined) return null;
    const key = `${kind}|${prompt}`;
    let hit = cache.get(key);
    if (hit === undefined) {
      const patterns = promptPatterns(wire, prompt, tokens.length, width, causal);
      hit = { patterns, source: denseSource(patterns) };
      cache.set(key, hit);
    }
    return hit;
  };
  const raw = read(index, "raw");
  if (raw === null) throw new Error("circuitwidgets: a batch without patterns");
  let value = read(index, "value");
  if (value !== null && (value.patterns.nLayers !== raw.patterns.nLayers || value.patterns.nHeads !== raw.patterns.nHeads)) value = null;
  const { nLayers, nHeads, nTokens } = raw.patterns;
  const per = (name: "value_norms" | "logit_effect") => promptPositions(model.get(name), index, nLayers, nHeads, nTokens, width);
  return {
    tokens: prompts[index] ?? [],
    raw: raw.source,
    value: value?.source ?? null,
    dense: { raw: raw.patterns, value: value?.patterns ?? null },
    long: null,
    norms: per("value_norms"),
    effect: per("logit_effect"),
    loss: perTokenLoss(model.get("per_token_loss"), nTokens, index, width),
    batch: { index, prompts, width, source: (prompt, kind) => read(prompt, kind)?.source ?? null },
  };
}


/** The title's subtitle: tokens and heads, and how they were computed (a prompt of a batch, windows, on demand). */
export function subtitleWords(d: Data, windows: AttentionTraits["windows"]): string {
  const parts = [`${d.tokens.length} tokens`, `${d.raw.nLayers} × ${d.raw.nHeads} heads`];
  if (d.batch !== null) parts.unshift(`prompt ${d.batch.index + 1} of ${d.batch.prompts.length}`);
  if (d.long !== null) parts.push("computed on demand");
  const starts = windows?.starts;
  if (Array.isArray(starts) && starts.length > 1) {
    parts.push(`${starts.length} windows of ${windows?.size} tokens, stride ${windows?.stride}; each row from the window that gives it the most left context`);
  }
  return parts.join(" · ");
}
