import { describe, expect, it } from "vitest";
import { columnWeights, headCells, pooledCells, rowWeights, toPatterns, triangleSize, weightAt, type Patterns } from "../src/lib/patterns";

/** Pack dense [L][H][n][n] uint8 weights the way Python does. */
function pack(dense: number[][][][], causal: boolean): Uint8Array {
  const out: number[] = [];
  for (const layer of dense)
    for (const head of layer)
      head.forEach((row, d) => {
        out.push(...(causal ? row.slice(0, d + 1) : row));
      });
  return Uint8Array.from(out);
}

function randomDense(L: number, H: number, n: number, causal: boolean, seed = 1): number[][][][] {
  let s = seed;
  const rand = (): number => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return s % 256;
  };
  return Array.from({ length: L }, () =>
    Array.from({ length: H }, () =>
      Array.from({ length: n }, (_, d) => Array.from({ length: n }, (_, c) => (causal && c > d ? 0 : rand()))),
    ),
  );
}

function patterns(dense: number[][][][], causal: boolean): Patterns {
  const L = dense.length;
  const H = dense[0]?.length ?? 0;
  const n = dense[0]?.[0]?.length ?? 0;
  const data = pack(dense, causal);
  const shape = causal ? [L, H, triangleSize(n)] : [L, H, n, n];
  return toPatterns({ data, dtype: "uint8", shape }, n, causal);
}

describe.each([true, false])("patterns (causal=%s)", (causal) => {
  const dense = randomDense(2, 3, 7, causal);
  const p = patterns(dense, causal);

  it("reads every weight where Python put it", () => {
    for (let l = 0; l < 2; l++)
      for (let h = 0; h < 3; h++)
        for (let d = 0; d < 7; d++)
          for (let s = 0; s < 7; s++) {
            const expected = causal && s > d ? -1 : dense[l]?.[h]?.[d]?.[s];
            expect(weightAt(p, l, h, d, s)).toBe(expected);
            expect(headCells(p, l, h).index(d, s)).toBe(expected);
          }
  });

  it("gives rows and columns as weights in [0, 1]", () => {
    const row = rowWeights(p, 1, 2, 4);
    const col = columnWeights(p, 1, 2, 3);
    for (let s = 0; s < 7; s++) {
      expect(row[s]).toBeCloseTo(causal && s > 4 ? 0 : (dense[1]?.[2]?.[4]?.[s] ?? 0) / 255, 6);
      expect(col[s]).toBeCloseTo(causal && 3 > s ? 0 : (dense[1]?.[2]?.[s]?.[3] ?? 0) / 255, 6);
    }
  });
});

describe("pooledCells", () => {
  it("keeps a thin previous-token diagonal when shrinking", () => {
    const n = 64;
    const dense = [[Array.from({ length: n }, (_, d) => Array.from({ length: n }, (_, s) => (s === Math.max(0, d - 1) ? 255 : 0)))]];
    const pooled = pooledCells(patterns(dense, true), 0, 0, 8);
    expect(pooled.rows).toBe(8);
    for (let b = 0; b < 8; b++) expect(pooled.index(b, b)).toBe(255);
    expect(pooled.index(0, 7)).toBe(-1); // nothing above the diagonal
    expect(pooled.index(7, 0)).toBe(0);
  });

  it("does not upsample short sequences", () => {
    expect(pooledCells(patterns(randomDense(1, 1, 3, true), true), 0, 0, 56).rows).toBe(3);
  });
});

describe("toPatterns", () => {
  it("refuses data that does not match the tokens", () => {
    expect(() => toPatterns({ data: new Uint8Array(10), dtype: "uint8", shape: [1, 1, 10] }, 5, true)).toThrow(/do not match 5 tokens/);
    expect(() => toPatterns({ data: new Float32Array(15), dtype: "float32", shape: [1, 1, 15] }, 5, true)).toThrow(/uint8/);
  });
});
