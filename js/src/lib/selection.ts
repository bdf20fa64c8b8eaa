// Selection helpers shared by the views: index checks, writing selections
// back to the kernel, and listening to trait changes with cleanup.

import type { AnyModel } from "@anywidget/types";

/** Sentinel for "nothing selected" in optional selection traits (mirrors Python's -1). */
export const NONE = -1;

/** True when `v` is an integer index in [0, n), or NONE when `optional`. */
export function isValidIndex(v: unknown, n: number, optional = false): v is number {
  if (typeof v !== "number" || !Number.isInteger(v)) return false;
  return (optional && v === NONE) || (v >= 0 && v < n);
}

/** `v` if it is a valid index in [0, n), else `fallback`. */
export function indexOr(v: unknown, n: number, fallback: number, optional = false): number {
  return isValidIndex(v, n, optional) ? v : fallback;
}

/** Clicking the selected item again clears an optional selection. */
export function toggle(current: number, clicked: number): number {
  return current === clicked ? NONE : clicked;
}

/** Set several traits and send them to the kernel in one message. */
export function setTraits<T extends Record<string, unknown>>(model: AnyModel<T>, patch: Partial<T>): void {
  let changed = false;
  for (const key of Object.keys(patch) as (keyof T & string)[]) {
    const value = patch[key] as T[typeof key];
    if (model.get(key) !== value) {
      model.set(key, value);
      changed = true;
    }
  }
  if (changed) model.save_changes();
}

/**
 * Call `callback` when any of `names` changes. Returns a function removing the
 * listeners (call it from the view's cleanup).
 */
export function onTraits<T extends Record<string, unknown>>(
  model: AnyModel<T>,
  names: readonly (keyof T & string)[],
  callback: () => void,
): () => void {
  for (const name of names) model.on(`change:${name}`, callback);
  return () => {
    for (const name of names) model.off(`change:${name}`, callback);
  };
}

/** Coalesce calls into one per animation frame (falls back to a microtask without rAF). */
export function perFrame(fn: () => void): { schedule(): void; cancel(): void } {
  let pending = false;
  let handle: number | null = null;
  const raf = globalThis.requestAnimationFrame?.bind(globalThis);
  const run = (): void => {
    if (!pending) return; // cancelled
    pending = false;
    handle = null;
    fn();
  };
  return {
    schedule() {
      if (pending) return;
      pending = true;
      if (raf) handle = raf(run);
      else queueMicrotask(run);
    },
    cancel() {
      if (handle !== null) globalThis.cancelAnimationFrame?.(handle);
      pending = false;
      handle = null;
    },
  };
}
