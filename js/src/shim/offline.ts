// The model of a widget in an exported page: what a view's `render` uses of
// an anywidget model (get, set, on, off, save_changes, send), over a plain
// state object, with no kernel. Also: reviving the page's base64 buffers, and
// linking the widgets of one page (a head chosen in one view moves the others).
//
// Built into its own small script (static/shim.js, build.mjs) that export.py
// inlines into every exported page; `main.ts` mounts the page's widgets.

type Callback = (...args: unknown[]) => void;

/** Bytes of a base64 string. */
export function b64bytes(text: string): Uint8Array {
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Bytes inflated with the platform's DecompressionStream (zlib "deflate", as Python's zlib.compress writes). */
export async function inflate(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** A page state with its `{__b64__}` / `{__b64z__}` buffers turned back into DataViews (as a live kernel sends them). */
export async function revive(value: unknown): Promise<unknown> {
  if (Array.isArray(value)) return Promise.all(value.map(revive));
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    if (typeof record.__b64__ === "string") return view(b64bytes(record.__b64__));
    if (typeof record.__b64z__ === "string") return view(await inflate(b64bytes(record.__b64z__)));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(record)) out[k] = await revive(v);
    return out;
  }
  return value;
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** An anywidget model with no kernel: changes stay in the page. `get("__offline__")` is true. */
export class OfflineModel {
  readonly state: Record<string, unknown>;
  private readonly listeners = new Map<string, Set<Callback>>();

  constructor(state: Record<string, unknown>) {
    this.state = state;
  }

  get(name: string): unknown {
    return name === "__offline__" ? true : this.state[name];
  }

  has(name: string): boolean {
    return Object.hasOwn(this.state, name);
  }

  set(name: string, value: unknown): void {
    const previous = this.state[name];
    this.state[name] = value;
    if (previous !== value) {
      this.emit(`change:${name}`, value, previous);
      this.emit("change");
    }
  }

  on(event: string, callback: Callback): void {
    for (const e of String(event).split(/\s+/)) {
      if (!e) continue;
      let set = this.listeners.get(e);
      if (set === undefined) this.listeners.set(e, (set = new Set()));
      set.add(callback);
    }
  }

  off(event?: string | null, callback?: Callback | null): void {
    if (event == null) {
      this.listeners.clear();
      return;
    }
    for (const e of String(event).split(/\s+/)) {
      if (callback == null) this.listeners.delete(e);
      else this.listeners.get(e)?.delete(callback);
    }
  }

  emit(event: string, ...args: unknown[]): void {
    for (const cb of [...(this.listeners.get(event) ?? [])]) cb(...args);
  }

  save_changes(): void {}

  send(): void {}
}

/**
 * Models that keep `names` equal: a change of one of those traits in any
 * member is set on every other member that holds it (so choosing a head in
 * one view of a page moves the others). Echoes stop at once: `set` of an
 * equal value emits nothing. A member may take part in some of the names only
 * (`names` of `add`), and hold a name under its own trait (`alias`: a patching
 * map's `selected_pos` linked as `selected_dest`).
 */
export class LinkGroup {
  readonly names: readonly string[];
  private readonly members: { model: OfflineModel; local: Map<string, string> }[] = [];
  /** True while a change is being copied to the members: their own change events then copy nothing back. */
  private syncing = false;

  constructor(names: readonly string[]) {
    this.names = names;
  }

  /**
   * Link `model` to the members before and after it, on `names` (default: the group's), each under
   * `alias[name]` or its own name. A head is one selection: when either of a member's
   * `selected_layer`/`selected_head` changes, both are copied (a click that keeps the layer must not
   * leave another view on its old layer), and a member joining the group starts on the first member's head.
   * A member with a layer and no head follows the others' layer and moves none of them.
   */
  add(model: OfflineModel, names: readonly string[] = this.names, alias: Readonly<Record<string, string>> = {}): void {
    const local = new Map<string, string>();
    for (const name of names) {
      const own = alias[name] ?? name;
      if (model.has(own)) local.set(name, own);
    }
    const me = { model, local };
    const first = this.members[0];
    if (first !== undefined) this.copy(first, me, HEAD_PAIR);
    this.members.push(me);
    for (const [name, own] of local) {
      model.on(`change:${own}`, (value: unknown) => {
        if (this.syncing) return;
        // a layer chosen in a view with no head (term importance) names no head: it moves no other view
        if ((HEAD_PAIR as readonly string[]).includes(name) && !local.has("selected_head")) return;
        for (const other of this.members) {
          if (other === me) continue;
          if ((HEAD_PAIR as readonly string[]).includes(name)) this.copy(me, other, HEAD_PAIR);
          else {
            const theirs = other.local.get(name);
            if (theirs !== undefined) this.set(other.model, theirs, value);
          }
        }
        if ((HEAD_PAIR as readonly string[]).includes(name)) this.follow(me);
      });
    }
  }

  /**
   * After a head chosen in `from`: each member with a `head_positions` table (`[layer][head]` → position, -1 for
   * none) moves its `selected_dest` to the head's entry, and the group's position with it (set as a change of its
   * own, not a copy, so it reaches the others).
   */
  private follow(from: { model: OfflineModel; local: Map<string, string> }): void {
    const layerName = from.local.get("selected_layer");
    const headName = from.local.get("selected_head");
    if (layerName === undefined || headName === undefined) return;
    const layer = Number(from.model.get(layerName));
    const head = Number(from.model.get(headName));
    for (const member of this.members) {
      const own = member.local.get("selected_dest");
      const table = member.model.get("head_positions");
      if (own === undefined || !Array.isArray(table)) continue;
      const row: unknown = table[layer];
      const position: unknown = Array.isArray(row) ? row[head] : undefined;
      if (typeof position === "number" && Number.isInteger(position) && position >= 0) member.model.set(own, position);
    }
  }

  /** Copy `names` that both members link from `from` to `to`, their change events copying nothing further. */
  private copy(from: { model: OfflineModel; local: Map<string, string> }, to: { model: OfflineModel; local: Map<string, string> }, names: readonly string[]): void {
    for (const name of names) {
      const mine = from.local.get(name);
      const theirs = to.local.get(name);
      if (mine !== undefined && theirs !== undefined) this.set(to.model, theirs, from.model.get(mine));
    }
  }

  private set(model: OfflineModel, name: string, value: unknown): void {
    const was = this.syncing;
    this.syncing = true;
    try {
      model.set(name, value);
    } finally {
      this.syncing = was;
    }
  }
}

/** The two traits of a head selection, linked as one. */
const HEAD_PAIR = ["selected_layer", "selected_head"] as const;

/** `"selected_dest=selected_pos other=mine"` (a page's `data-cw-link-as`) as a record. */
export function parseAliases(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (text ?? "").split(/\s+/)) {
    const [name, own] = pair.split("=");
    if (name && own) out[name] = own;
  }
  return out;
}
