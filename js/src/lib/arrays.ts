// Decoding of numpy arrays sent by the kernel.
//
// Python (circuitwidgets/widgets/core/arrays.py) sends an array as
// `{ view, dtype, shape }` where `view` is a binary buffer (ipywidgets hands it
// to us as a DataView), `dtype` a numpy dtype name and `shape` the numpy shape.
// Bytes are little-endian and C-ordered. float16 has no typed array in our
// targets, so it is widened to Float32Array here.

export type DType =
  | "bool"
  | "uint8"
  | "int8"
  | "uint16"
  | "int16"
  | "uint32"
  | "int32"
  | "float16"
  | "float32"
  | "float64";

export type TypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array;

/** An array as it arrives from the kernel. */
export interface WireArray {
  view: DataView | ArrayBuffer | ArrayBufferView;
  dtype: DType;
  shape: number[];
}

/** A decoded array: flat C-ordered data plus its shape. */
export interface NDArray<T extends TypedArray = TypedArray> {
  data: T;
  /** dtype as sent; float16 arrives as `Float32Array` data. */
  dtype: DType;
  shape: number[];
}

type Ctor = { new (buffer: ArrayBuffer, byteOffset: number, length: number): TypedArray; BYTES_PER_ELEMENT: number };

const CTORS: Record<Exclude<DType, "float16">, Ctor> = {
  bool: Uint8Array,
  uint8: Uint8Array,
  int8: Int8Array,
  uint16: Uint16Array,
  int16: Int16Array,
  uint32: Uint32Array,
  int32: Int32Array,
  float32: Float32Array,
  float64: Float64Array,
};

/** Number of elements of an array of this shape. */
export function sizeOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

function asBytes(view: WireArray["view"]): Uint8Array {
  if (view instanceof ArrayBuffer) return new Uint8Array(view);
  return new Uint8Array(view.buffer as ArrayBuffer, view.byteOffset, view.byteLength);
}

/** Reinterpret bytes as `ctor`, copying only when the offset is misaligned. */
function viewAs(bytes: Uint8Array, ctor: Ctor, length: number): TypedArray {
  if (bytes.byteOffset % ctor.BYTES_PER_ELEMENT !== 0) {
    bytes = bytes.slice(0, length * ctor.BYTES_PER_ELEMENT);
  }
  return new ctor(bytes.buffer as ArrayBuffer, bytes.byteOffset, length);
}

const F16_EXP = new Float32Array(32);
for (let e = 0; e < 32; e++) F16_EXP[e] = 2 ** (e - 15);

/** One IEEE 754 half-precision bit pattern to a number. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 0x1f) return frac ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (F16_EXP[exp] as number) * (1 + frac / 1024);
}

/** Widen float16 bit patterns to a Float32Array. */
export function float16ToFloat32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = halfToFloat(bits[i] as number);
  return out;
}

/**
 * Decode an array sent by the kernel into a typed array (no copy unless the
 * buffer is misaligned or the dtype is float16).
 *
 * @throws Error when the dtype is unknown or the byte length does not match
 *   the shape.
 */
export function decodeArray(wire: WireArray): NDArray {
  const { dtype, shape } = wire;
  const n = sizeOf(shape);
  const bytes = asBytes(wire.view);
  const itemsize = dtype === "float16" ? 2 : CTORS[dtype]?.BYTES_PER_ELEMENT;
  if (itemsize === undefined) throw new Error(`circuitwidgets: unsupported dtype ${JSON.stringify(dtype)}`);
  if (bytes.byteLength !== n * itemsize) {
    throw new Error(
      `circuitwidgets: array of shape [${shape.join(", ")}] and dtype ${dtype} needs ${n * itemsize} bytes, got ${bytes.byteLength}`,
    );
  }
  if (dtype === "float16") {
    return { data: float16ToFloat32(viewAs(bytes, Uint16Array, n) as Uint16Array), dtype, shape: [...shape] };
  }
  return { data: viewAs(bytes, CTORS[dtype], n), dtype, shape: [...shape] };
}

/** Decode, or return null for a missing array (trait value `None`). */
export function decodeOptional(wire: WireArray | null | undefined): NDArray | null {
  return wire == null ? null : decodeArray(wire);
}
