// A stand-in for the widget model: Backbone-like get/set/on/off, records save_changes.
import type { AnyModel } from "@anywidget/types";

type Handler = (...args: unknown[]) => void;

export class FakeModel<T extends Record<string, unknown>> {
  saves: Partial<T>[] = [];
  private state: T;
  private pending: Partial<T> = {};
  private handlers = new Map<string, Set<Handler>>();

  constructor(state: T) {
    this.state = { ...state };
  }

  get<K extends keyof T>(key: K): T[K] {
    return this.state[key];
  }

  set<K extends keyof T>(key: K, value: T[K]): void {
    this.state[key] = value;
    this.pending[key] = value;
    this.emit(`change:${String(key)}`);
  }

  /** A change arriving from the kernel (not recorded as a save). */
  fromKernel(patch: Partial<T>): void {
    for (const [key, value] of Object.entries(patch)) {
      this.state[key as keyof T] = value as T[keyof T];
      this.emit(`change:${key}`);
    }
  }

  on(event: string, handler: Handler): void {
    const set = this.handlers.get(event) ?? new Set();
    set.add(handler);
    this.handlers.set(event, set);
  }

  off(event?: string | null, handler?: Handler | null): void {
    if (event == null) this.handlers.clear();
    else if (handler == null) this.handlers.delete(event);
    else this.handlers.get(event)?.delete(handler);
  }

  listenerCount(): number {
    let n = 0;
    for (const set of this.handlers.values()) n += set.size;
    return n;
  }

  save_changes(): void {
    this.saves.push(this.pending);
    this.pending = {};
  }

  send(): void {}

  private emit(event: string): void {
    for (const h of this.handlers.get(event) ?? []) h();
  }

  asModel(): AnyModel<T> {
    return this as unknown as AnyModel<T>;
  }
}
