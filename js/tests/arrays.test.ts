import { describe, expect, it } from "vitest";
import { decodeArray, float16ToFloat32, halfToFloat, sizeOf } from "../src/lib/arrays";

function dataView(bytes: ArrayLike<number>, offset = 0): DataView {
  const buf = new ArrayBuffer(bytes.length + offset);
  new Uint8Array(buf).set(Array.from(bytes), offset);
  return new DataView(buf, offset, bytes.length);
}

describe("decodeArray", () => {
  it("reads uint8 without copying", () => {
    const view = dataView([0, 1, 2, 255, 4, 5]);
    const a = decodeArray({ view, dtype: "uint8", shape: [2, 3] });
    expect(a.data).toBeInstanceOf(Uint8Array);
    expect(Array.from(a.data)).toEqual([0, 1, 2, 255, 4, 5]);
    expect(a.shape).toEqual([2, 3]);
    expect(a.data.buffer).toBe(view.buffer);
  });

  it("reads little-endian float32 and int32", () => {
    const f = new Float32Array([1.5, -2, 3.25]);
    const a = decodeArray({ view: new DataView(f.buffer), dtype: "float32", shape: [3] });
    expect(Array.from(a.data)).toEqual([1.5, -2, 3.25]);
    const i = new Int32Array([-7, 0, 1 << 30]);
    expect(Array.from(decodeArray({ view: i.buffer, dtype: "int32", shape: [3] }).data)).toEqual([-7, 0, 1 << 30]);
  });

  it("copies when the buffer offset is misaligned for the dtype", () => {
    const f = new Float32Array([0.5, 8]);
    const view = dataView(new Uint8Array(f.buffer), 1);
    const a = decodeArray({ view, dtype: "float32", shape: [2] });
    expect(Array.from(a.data)).toEqual([0.5, 8]);
  });

  it("widens float16 to Float32Array", () => {
    const bits = new Uint16Array([0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x0000, 0x8000]);
    const a = decodeArray({ view: new DataView(bits.buffer), dtype: "float16", shape: [9] });
    expect(a.data).toBeInstanceOf(Float32Array);
    expect(Array.from(a.data)).toEqual([1, -2, 0.5, 65504, 2 ** -24, Infinity, -Infinity, 0, -0]);
    expect(Number.isNaN(halfToFloat(0x7e00))).toBe(true);
  });

  it("round-trips every float16 bit pattern through Math.fround", () => {
    const all = new Uint16Array(65536).map((_, i) => i);
    const f = float16ToFloat32(all);
    for (let i = 0; i < 65536; i += 97) {
      const v = f[i] as number;
      if (!Number.isNaN(v)) expect(Math.fround(v)).toBe(v);
    }
  });

  it("handles empty and 0-d arrays", () => {
    expect(decodeArray({ view: new ArrayBuffer(0), dtype: "float32", shape: [0, 3] }).data.length).toBe(0);
    expect(Array.from(decodeArray({ view: dataView([9]), dtype: "uint8", shape: [] }).data)).toEqual([9]);
    expect(sizeOf([])).toBe(1);
  });

  it("refuses a byte length that does not match the shape, and unknown dtypes", () => {
    expect(() => decodeArray({ view: dataView([1, 2, 3]), dtype: "uint8", shape: [2, 2] })).toThrow(/needs 4 bytes, got 3/);
    expect(() => decodeArray({ view: dataView([1]), dtype: "complex64" as never, shape: [1] })).toThrow(/unsupported dtype/);
  });
});
