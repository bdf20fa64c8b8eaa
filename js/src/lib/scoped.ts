// A model adapter that lets a view run unchanged inside the explorer.
//
// The explorer keeps each view's data (kernel → view) in one dictionary trait,
// `<view>_data`, and its settings and kernel replies in flat traits
// `<prefix><name>`; the head selection is shared by every view. The names come
// from the kernel (the explorer's `_children` trait, derived in Python from
// each widget's definition), so they are stated once. `scopedModel` gives a
// view a model whose `get`/`set`/`on`/`off` use the view's own trait names:
//
//   name in `shared`  → the explorer trait it maps to (selected_layer → selected_layer)
//   name in `own`     → `<prefix><name>` (the view's settings and replies)
//   otherwise         → `<data>[name]` (the view's data)
//
// `set` of a data name writes `<prefix><name>`, which the explorer does not
// have: a view never sets its data, and such a write does not reach the kernel.

import type { AnyModel } from "@anywidget/types";

export interface ScopeSpec {
  /** Prefix of the view's own traits, e.g. `"trigram_"`. */
  prefix: string;
  /** Name of the dictionary trait holding the view's data, e.g. `"trigram_data"`. */
  data: string;
  /** View trait name → explorer trait name for the shared selection. */
  shared: Readonly<Record<string, string>>;
  /** The view's traits kept as `<prefix><name>` (settings and kernel replies). */
  own: readonly string[];
}

/** One child view of the explorer, as the kernel describes it in `_children`. */
export interface ChildSpec extends ScopeSpec {
  /** Name of the view (the `_view` of its widget). */
  view: string;
}

/** The explorer's `_children` trait, checked (entries that are not well-formed are left out). */
export function childSpecs(value: unknown): ChildSpec[] {
  if (!Array.isArray(value)) return [];
  const out: ChildSpec[] = [];
  for (const v of value) {
    if (v === null || typeof v !== "object") continue;
    const c = v as Record<string, unknown>;
    const strings = (x: unknown): x is string[] => Array.isArray(x) && x.every((s) => typeof s === "string");
    const shared = c.shared as Record<string, unknown> | null | undefined;
    if (typeof c.view !== "string" || typeof c.prefix !== "string" || typeof c.data !== "string" || !strings(c.own)) continue;
    if (shared === null || typeof shared !== "object" || !Object.values(shared).every((s) => typeof s === "string")) continue;
    out.push({ view: c.view, prefix: c.prefix, data: c.data, own: c.own, shared: shared as Record<string, string> });
  }
  return out;
}

type Callback = (...args: unknown[]) => void;

/** Where a view's trait lives in the explorer model. */
export type Target = { kind: "shared" | "own"; name: string } | { kind: "data"; name: string; key: string };

/** Where a view trait name lives in the explorer model. */
export function resolveKey(spec: ScopeSpec, key: string): Target {
  const shared = spec.shared[key];
  if (shared !== undefined) return { kind: "shared", name: shared };
  if (spec.own.includes(key)) return { kind: "own", name: spec.prefix + key };
  return { kind: "data", name: spec.data, key };
}

/** Explorer events a view's `change:<key>` must follow. */
export function changeEvents(spec: ScopeSpec, key: string): string[] {
  const target = resolveKey(spec, key);
  return [`change:${target.name}`];
}

/** A model for one view inside the explorer (see the module comment). */
export function scopedModel<T extends Record<string, unknown>>(model: AnyModel, spec: ScopeSpec): AnyModel<T> {
  const registered: { event: string; callback: Callback; real: string[] }[] = [];

  function realEvents(event: string): string[] {
    const out: string[] = [];
    for (const name of event.split(/\s+/)) {
      if (name.startsWith("change:")) out.push(...changeEvents(spec, name.slice(7)));
      else if (name) out.push(name);
    }
    return out;
  }

  const scoped = {
    get(key: string): unknown {
      if (key === "__offline__") return model.get(key as never);
      const target = resolveKey(spec, key);
      if (target.kind !== "data") return model.get(target.name as never);
      const data = model.get(target.name as never) as Record<string, unknown> | null | undefined;
      return data == null ? undefined : data[target.key];
    },
    set(key: string, value: unknown): void {
      const shared = spec.shared[key];
      model.set((shared ?? spec.prefix + key) as never, value as never);
    },
    on(event: string, callback: Callback): void {
      const real = realEvents(event);
      for (const e of real) model.on(e, callback);
      registered.push({ event, callback, real });
    },
    off(event?: string | null, callback?: Callback | null): void {
      for (let i = registered.length - 1; i >= 0; i--) {
        const r = registered[i] as (typeof registered)[number];
        if ((event == null || r.event === event) && (callback == null || r.callback === callback)) {
          for (const e of r.real) model.off(e, r.callback);
          registered.splice(i, 1);
        }
      }
    },
    save_changes(): void {
      model.save_changes();
    },
    send(content: unknown, callbacks?: unknown, buffers?: unknown): void {
      (model.send as (...a: unknown[]) => void)(content, callbacks, buffers);
    },
    get widget_manager(): unknown {
      return (model as unknown as { widget_manager?: unknown }).widget_manager;
    },
  };
  return scoped as unknown as AnyModel<T>;
}
