import { describe, expect, it } from "vitest";
import {
  asFloat32,
  keyOf,
  levelFor,
  maskedTile,
  maxLevel,
  type TileGrid,
  type TileKey,
  TileStore,
  tilesFor,
  tokenWindow,
  valueAt,
  viewCells,
} from "../src/lib/tiles";

const GRID: TileGrid = { n: 32768, tileSize: 64, block: 128 };

function recorder(): { sent: Record<string, unknown>[]; store: TileStore } {
  const sent: Record<string, unknown>[] = [];
  return { sent, store: new TileStore((m) => sent.push(m), 3) };
}

function reply(key: TileKey, id: number, rows = 2, cols = 2, fill = 0.5): [Record<string, unknown>, ArrayBuffer[]] {
  const max = new Float32Array(rows * cols).fill(fill);
  const mean = new Float32Array(rows * cols).fill(fill / 2);
  return [{ type: "tile", id, ...key, rows, cols }, [max.buffer, mean.buffer]];
}

const K = (row: number, col: number, level = 0): TileKey => ({ layer: 0, head: 1, level, row, col });

describe("levels and tiles", () => {
  it("asks for nothing finer than the overview when the whole matrix is in view", () => {
    expect(levelFor(32768, 440, GRID)).toBeNull(); // 74 tokens a pixel: the 128-token overview blocks do
    expect(levelFor(16384, 440, GRID)).toBe(6); // 37 a pixel: blocks of 64
    expect(levelFor(300, 440, GRID)).toBe(0); // less than one a pixel: single weights
    expect(maxLevel(GRID)).toBe(6);
  });

  it("covers the viewport with tiles, nearest the centre first", () => {
    const tiles = tilesFor({ r0: 60, c0: 0, size: 80 }, 0, GRID); // rows 60..139, cols 0..79: rows 0-2 × cols 0-1
    expect(tiles).toHaveLength(6);
    expect(tiles[0]).toEqual({ row: 1, col: 0 });
    expect(new Set(tiles.map((t) => `${t.row},${t.col}`))).toEqual(new Set(["0,0", "0,1", "1,0", "1,1", "2,0", "2,1"]));
  });

  it("never asks for tiles above a causal diagonal", () => {
    expect(maskedTile(K(0, 1), GRID, true)).toBe(true);
    expect(maskedTile(K(1, 1), GRID, true)).toBe(false);
    expect(maskedTile(K(0, 1), GRID, false)).toBe(false);
  });
});

describe("TileStore: request, cancel, cache", () => {
  it("asks once for each missing tile and not again while it is in flight", () => {
    const { sent, store } = recorder();
    store.want([K(0, 0), K(1, 0)]);
    store.want([K(0, 0), K(1, 0)]);
    expect(sent.map((m) => m.type)).toEqual(["tile", "tile"]);
    expect(sent[0]).toMatchObject({ type: "tile", id: 0, layer: 0, head: 1, level: 0, row: 0, col: 0 });
    expect(store.pending).toBe(2);
  });

  it("cancels requests that scrolled away and drops their late answers", () => {
    const { sent, store } = recorder();
    store.want([K(0, 0), K(1, 0)]);
    store.want([K(5, 5)]);
    expect(sent[2]).toEqual({ type: "cancel", ids: [0, 1] });
    expect(sent[3]).toMatchObject({ type: "tile", id: 2, row: 5, col: 5 });
    const [content, buffers] = reply(K(0, 0), 0);
    expect(store.receive(content, buffers)).toBeNull(); // cancelled: not cached
    expect(store.has(K(0, 0))).toBe(false);
  });

  it("caches answers, serves them without asking again, and forgets the least recently used", () => {
    const { sent, store } = recorder();
    store.want([K(0, 0), K(1, 0), K(2, 0), K(3, 0)]);
    for (let i = 0; i < 4; i++) {
      const [content, buffers] = reply(K(i, 0), i);
      expect(store.receive(content, buffers)).not.toBeNull();
    }
    expect(store.size).toBe(3); // capacity 3: K(0, 0) went
    expect(store.has(K(0, 0))).toBe(false);
    store.get(K(1, 0)); // touch: now K(2, 0) is the oldest
    const before = sent.length;
    store.want([K(1, 0), K(2, 0), K(3, 0)]);
    expect(sent.length).toBe(before); // all cached: nothing asked
    store.want([K(4, 0)]);
    store.receive(...reply(K(4, 0), 4));
    expect(store.has(K(2, 0))).toBe(false);
    expect(store.has(K(1, 0))).toBe(true);
  });

  it("refuses answers whose buffers do not match their header, and records kernel errors", () => {
    const { store } = recorder();
    store.want([K(0, 0)]);
    const [content] = reply(K(0, 0), 0, 2, 2);
    expect(store.receive(content, [new Float32Array(3).buffer, new Float32Array(4).buffer])).toBeNull();
    expect(store.receive({ ...content, rows: -1 }, [])).toBeNull();
    store.want([K(0, 1)]);
    expect(store.receive({ type: "tile_error", id: 1, message: "tile request: outside" }, [])).toBeNull();
    expect(store.lastError).toContain("outside");
    expect(store.pending).toBe(0);
  });

  it("reads misaligned buffers by copying", () => {
    const bytes = new Uint8Array(9);
    new DataView(bytes.buffer).setFloat32(1, 0.25, true);
    expect(Array.from(asFloat32(new DataView(bytes.buffer, 1, 4)) ?? [])).toEqual([0.25]);
    expect(asFloat32("x")).toBeNull();
    expect(keyOf(K(2, 3, 1))).toBe("raw.0.1.1.2.3");
    expect(keyOf({ ...K(2, 3, 1), kind: "value" })).toBe("value.0.1.1.2.3");
  });
});

describe("drawing from what is known, coarse first", () => {
  const grid: TileGrid = { n: 256, tileSize: 4, block: 16 }; // overview 16 × 16
  const overview = new Float32Array(16 * 16).fill(0.1);
  const head = { layer: 0, head: 1, overview };

  it("falls back to the overview until a finer tile arrives", () => {
    const { store } = recorder();
    expect(valueAt(store, head, grid, 0, 5, 3)).toEqual({ value: expect.closeTo(0.1, 6), block: 16 });
    store.want([K(1, 0, 0)]); // level 0 covers rows 4..7, cols 0..3
    const max = Float32Array.from({ length: 16 }, (_, i) => i / 100);
    store.receive({ type: "tile", id: 0, ...K(1, 0, 0), rows: 4, cols: 4 }, [max.buffer, max.slice().buffer]);
    expect(valueAt(store, head, grid, 0, 5, 3)).toEqual({ value: expect.closeTo(0.07, 6), block: 1 }); // cell (1, 3)
  });

  it("resamples the viewport and masks cells wholly above a causal diagonal", () => {
    const { store } = recorder();
    const cells = viewCells(store, head, grid, { r0: 0, c0: 0, size: 256 }, 8, true);
    expect(cells.rows).toBe(8);
    expect(cells.values[0 * 8 + 7]).toBe(-1);
    expect(cells.values[7 * 8 + 0]).toBeCloseTo(0.1, 6);
  });

  it("keeps the token strip to a window around the view or the selection", () => {
    expect(tokenWindow({ r0: 0, c0: 0, size: 32768 }, 32768, 400)).toEqual({ start: 16184, end: 16584 });
    expect(tokenWindow({ r0: 0, c0: 0, size: 32768 }, 32768, 400, 100)).toEqual({ start: 0, end: 400 });
    expect(tokenWindow({ r0: 10, c0: 0, size: 50 }, 32768, 400)).toEqual({ start: 10, end: 60 });
  });
});
