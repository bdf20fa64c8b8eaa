// A model adapter that lets a view run unchanged inside the explorer.
//
// The explorer keeps each view's data (kernel → view) in one dictionary trait,
// `<view>_data`, and what the view may change in flat traits `<prefix><name>`;
// the head selection is shared by every view. `scopedModel` gives a view a
// model whose `get`/`set`/`on`/`off` use the view's own trait names:
//
//   name in `shared`            → the explorer trait it maps to (e.g. layer → selected_layer)
//   `<prefix><name>` is defined → that flat trait (the view's own state)
//   otherwise                   → `<data>[name]` (the view's data)
//
// `set` of an unshared name always writes `<prefix><name>`, so a front-end
// only setting the explorer does not declare still works (it simply does not
// reach the kernel).

import type { AnyModel } from "@anywidget/types";

export interface ScopeSpec {
  /** Prefix of the view's own traits, e.g. `"trigram_"`. */
  prefix: string;
  /** Name of the dictionary trait holding the view's data, e.g. `"trigram_data"`. */
  data: string;
  /** View trait name → explorer trait name for the shared selection. */
  shared: Readonly<Record<string, string>>;
}

type Callback = (...args: unknown[]) => void;

/** Where a view's trait lives in the explorer model. */
export type Target = { kind: "shared" | "own"; name: string } | { kind: "data"; name: string; key: string };

/** Resolve a view trait name (for reading) against the explorer model. */
export function resolveKey(model: Pick<AnyModel, "get">, spec: ScopeSpec, key: string): Target {
  const shared = spec.shared[key];
  if (shared !== undefined) return { kind: "shared", name: shared };
  const own = spec.prefix + key;
  if (model.get(own) !== undefined) return { kind: "own", name: own };
  return { kind: "data", name: spec.data, key };
}

/** Explorer events a view's `change:<key>` must follow (own trait and data dictionary both, when unshared). */
export function changeEvents(spec: ScopeSpec, key: string): string[] {
  const shared = spec.shared[key];
  if (shared !== undefined) return [`change:${shared}`];
  return [`change:${spec.prefix}${key}`, `change:${spec.data}`];
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
      const target = resolveKey(model as Pick<AnyModel, "get">, spec, key);
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
