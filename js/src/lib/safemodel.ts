// One escaping path for every string a view shows (issue 45).
//
// Every string a view draws comes from its model: traits (`model.get`) and the
// kernel's custom messages (`msg:custom`). `safeModel` wraps the model each view
// is given (index.ts, so the explorer's children too), and every string read
// through it has its bidi controls, zero-width and other invisible format
// characters, C1 controls and C0 controls other than newline and tab replaced by
// the escapes `visibleLabel` and `visibleToken` write (`\u202e`, `\x0d`). So a
// caption, a metric's name, a user's label or a status line cannot reorder or
// hide the text around it in the page or in an SVG export, whichever code path
// writes it. Newline and tab are left for `visibleToken` to show as ⏎ and →;
// the escapes are fixed points of both functions, so tokens look exactly as before.

import type { AnyModel } from "@anywidget/types";
import { isInvisibleFormat } from "./tokens";

// the characters escaped here (surrogate pairs of tag characters included); a fast test before any copy
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]|\udb40[\udc00-\udc7f]/;

function escapeChar(code: number): string {
  if (code < 0x20 || code === 0x7f) return `\\x${code.toString(16).padStart(2, "0")}`;
  return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `text` with the characters that could reorder or hide page text escaped (newline and tab kept). */
export function safeText(text: string): string {
  if (!UNSAFE.test(text)) return text;
  let out = "";
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    const control = (code < 0x20 && ch !== "\n" && ch !== "\t") || (code >= 0x7f && code <= 0x9f);
    out += control || isInvisibleFormat(code) ? escapeChar(code) : ch;
  }
  return out;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object") return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** `value` with every string in it (arrays and plain objects, keys too) made safe; binary data untouched. */
export function safeValue(value: unknown): unknown {
  if (typeof value === "string") return safeText(value);
  if (Array.isArray(value)) {
    let changed = false;
    const out = value.map((v) => {
      const s = safeValue(v);
      changed ||= s !== v;
      return s;
    });
    return changed ? out : value;
  }
  if (isPlainObject(value)) {
    let changed = false;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = safeText(k);
      const s = safeValue(v);
      changed ||= s !== v || key !== k;
      out[key] = s;
    }
    return changed ? out : value;
  }
  return value; // numbers, booleans, DataView/ArrayBuffer/typed arrays (binary buffers), null
}

type Callback = (...args: unknown[]) => void;

/** A view's model whose `get` and `msg:custom` messages carry only safe strings (everything else passes through). */
export function safeModel<M extends AnyModel>(model: M): M {
  const memo = new Map<string, { raw: unknown; safe: unknown }>();
  const wrapped = new WeakMap<Callback, Callback>();
  const get = (key: string): unknown => {
    const raw = model.get(key as never);
    const seen = memo.get(key);
    if (seen !== undefined && seen.raw === raw) return seen.safe;
    const safe = safeValue(raw);
    memo.set(key, { raw, safe });
    return safe;
  };
  const on = (event: string, callback: Callback, context?: unknown): void => {
    let cb = callback;
    if (event === "msg:custom") {
      cb = wrapped.get(callback) ?? ((msg: unknown, ...rest: unknown[]) => callback(safeValue(msg), ...rest));
      wrapped.set(callback, cb);
    }
    (model.on as (e: string, c: Callback, x?: unknown) => void)(event, cb, context);
  };
  const off = (event?: string | null, callback?: Callback | null, context?: unknown): void => {
    const cb = callback ? (wrapped.get(callback) ?? callback) : callback;
    (model.off as (e?: string | null, c?: Callback | null, x?: unknown) => void)(event, cb, context);
  };
  return new Proxy(model, {
    get(target, prop) {
      if (prop === "get") return get;
      if (prop === "on") return on;
      if (prop === "off") return off;
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as Callback).bind(target) : value;
    },
  });
}
