// Sorting and paging of table rows (pure, testable without a DOM).

/** Sort direction. */
export type Direction = "asc" | "desc";

/**
 * Indices `0..n-1` ordered by `key(i)` (stable; NaN last whatever the
 * direction; ties keep canonical order).
 */
export function sortedOrder(n: number, key: (i: number) => number | string, direction: Direction): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  const sign = direction === "asc" ? 1 : -1;
  order.sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    const na = typeof ka === "number" && Number.isNaN(ka);
    const nb = typeof kb === "number" && Number.isNaN(kb);
    if (na || nb) return na && nb ? a - b : na ? 1 : -1;
    if (ka < kb) return -sign;
    if (ka > kb) return sign;
    return a - b;
  });
  return order;
}

/** Number of pages of `n` rows, at least 1. */
export function pageCount(n: number, pageSize: number): number {
  return Math.max(1, Math.ceil(n / Math.max(1, pageSize)));
}

/** `page` clamped to the valid pages. */
export function clampPage(page: number, n: number, pageSize: number): number {
  if (!Number.isFinite(page)) return 0;
  return Math.min(pageCount(n, pageSize) - 1, Math.max(0, Math.floor(page)));
}

/** The slice of `order` shown on `page`, with its 1-based first and last row numbers. */
export function pageSlice<T>(order: readonly T[], page: number, pageSize: number): { rows: T[]; first: number; last: number; page: number } {
  const p = clampPage(page, order.length, pageSize);
  const start = p * pageSize;
  const rows = order.slice(start, start + pageSize);
  return { rows, first: rows.length ? start + 1 : 0, last: start + rows.length, page: p };
}

/** Page on which the row at sorted position `position` appears. */
export function pageOf(position: number, pageSize: number): number {
  return position < 0 ? 0 : Math.floor(position / Math.max(1, pageSize));
}
