// Colour scales: perceptually uniform and colour-blind safe.
//
// - `VIRIDIS`: sequential (matplotlib's viridis), for non-negative values such
//   as attention weights.
// - `DIVERGING`: signed (ColorBrewer RdBu, blue < 0 < red, white at 0), for
//   logit effects, eigenvalues, OV/QK entries.
//
// Scales are 256-entry RGBA lookup tables (`Uint8ClampedArray(1024)`), built
// by interpolating anchor colours in OKLab so steps stay perceptually even.

import { layerColour } from "./svg";

export type RGB = readonly [number, number, number];
export type Lut = Uint8ClampedArray;

function hexToRgb(hex: string): RGB {
  const n = Number.parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

function toLinear(c: number): number {
  const s = c / 255;
  return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
}

function fromLinear(l: number): number {
  const s = l <= 0.0031308 ? 12.92 * l : 1.055 * l ** (1 / 2.4) - 0.055;
  return Math.round(Math.min(1, Math.max(0, s)) * 255);
}

/** sRGB (0–255) to OKLab. */
export function rgbToOklab([r, g, b]: RGB): RGB {
  const lr = toLinear(r);
  const lg = toLinear(g);
  const lb = toLinear(b);
  const l = Math.cbrt(0.4122214708 * lr + 0.5363325363 * lg + 0.0514459929 * lb);
  const m = Math.cbrt(0.2119034982 * lr + 0.6806995451 * lg + 0.1073969566 * lb);
  const s = Math.cbrt(0.0883024619 * lr + 0.2817188376 * lg + 0.6299787005 * lb);
  return [
    0.2104542553 * l + 0.793617785 * m - 0.0040720468 * s,
    1.9779984951 * l - 2.428592205 * m + 0.4505937099 * s,
    0.0259040371 * l + 0.7827717662 * m - 0.808675766 * s,
  ];
}

/** OKLab to sRGB (0–255, clamped). */
export function oklabToRgb([L, a, b]: RGB): RGB {
  const l = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3;
  const m = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3;
  const s = (L - 0.0894841775 * a - 1.291485548 * b) ** 3;
  return [
    fromLinear(4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s),
    fromLinear(-1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s),
    fromLinear(-0.0041960863 * l - 0.7034186147 * m + 1.707614701 * s),
  ];
}

/** A 256-entry RGBA table through evenly spaced anchor colours, interpolated in OKLab. */
export function makeLut(anchors: readonly string[]): Lut {
  const labs = anchors.map((h) => rgbToOklab(hexToRgb(h)));
  const lut = new Uint8ClampedArray(256 * 4);
  const segments = labs.length - 1;
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * segments;
    const k = Math.min(segments - 1, Math.floor(x));
    const f = x - k;
    const p = labs[k] as RGB;
    const q = labs[k + 1] as RGB;
    const [r, g, b] = oklabToRgb([p[0] + f * (q[0] - p[0]), p[1] + f * (q[1] - p[1]), p[2] + f * (q[2] - p[2])]);
    lut.set([r, g, b, 255], i * 4);
  }
  return lut;
}

/** matplotlib viridis sampled at 0, 1/8, …, 1. */
export const VIRIDIS = makeLut([
  "#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725",
]);

/** ColorBrewer RdBu (colour-blind safe), negative blue → 0 white → positive red. */
export const DIVERGING = makeLut([
  "#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f",
]);

/**
 * The one sign convention of every view (docs/style.md): a positive value is red, a negative one blue, the two
 * ends of `DIVERGING` (RdBu), so a bar, an edge, a number and a heatmap cell of the same sign share a hue. Every
 * legend of a signed quantity says it in the same words, `SIGN_WORDS`, followed by what the sign means there.
 */
export const POSITIVE = "#b2182b";
export const NEGATIVE = "#2166ac";
export const SIGN_WORDS = { positive: "red: positive", negative: "blue: negative" } as const;

/** The colour of a signed value's sign (0 counts as positive). */
export function signColour(v: number): string {
  return v < 0 ? NEGATIVE : POSITIVE;
}

/** A legend line for a signed quantity: `red: positive, <positive meaning> · blue: negative, <negative meaning>`. */
export function signLegend(positive: string, negative: string): string {
  return `${SIGN_WORDS.positive}, ${positive} · ${SIGN_WORDS.negative}, ${negative}`;
}

/** LUT index (0–255) of `t` in [0, 1], clamped; NaN maps to 0. */
export function sequentialIndex(t: number): number {
  if (!(t > 0)) return 0;
  return t >= 1 ? 255 : Math.round(t * 255);
}

/** LUT index (0–255) of a signed value `v` on a symmetric scale of half-width `limit`; 0 maps to the middle. */
export function divergingIndex(v: number, limit: number): number {
  if (!(limit > 0) || Number.isNaN(v)) return 128;
  return sequentialIndex((v / limit + 1) / 2);
}

/** CSS colour of LUT entry `i`. */
export function lutCss(lut: Lut, i: number): string {
  const j = Math.max(0, Math.min(255, Math.round(i))) * 4;
  return `rgb(${lut[j]}, ${lut[j + 1]}, ${lut[j + 2]})`;
}

/** Relative luminance (0–1) of LUT entry `i`, to pick a readable text colour on it. */
export function lutLuminance(lut: Lut, i: number): number {
  const j = Math.max(0, Math.min(255, Math.round(i))) * 4;
  return 0.2126 * toLinear(lut[j] as number) + 0.7152 * toLinear(lut[j + 1] as number) + 0.0722 * toLinear(lut[j + 2] as number);
}

/**
 * Layer colours beyond a categorical palette: viridis up to its green (its
 * last yellows are too pale on white), so 32 layers get 32 colours that run
 * in order from dark purple to green and layer 0 never looks like layer 8.
 */
export const LAYER_RAMP = makeLut(["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30"]);

/** Layers up to which the categorical palette (Okabe–Ito, eight colours) names each layer with its own colour. */
export const CATEGORICAL_LAYERS = 8;

/** LUT index (0–255) of layer `layer` of `nLayers` on `LAYER_RAMP`: the first layer 0, the last 255. */
export function layerRampIndex(layer: number, nLayers: number): number {
  return nLayers > 1 ? Math.round((255 * Math.max(0, Math.min(nLayers - 1, layer))) / (nLayers - 1)) : 0;
}

/**
 * Colour of each layer of an `nLayers`-layer model: its own Okabe–Ito colour
 * up to eight layers, else its place on `LAYER_RAMP` (pair it with a colour
 * bar labelled by layer).
 */
export function layerPalette(nLayers: number): (layer: number) => string {
  if (nLayers <= CATEGORICAL_LAYERS) return layerColour;
  return (layer) => lutCss(LAYER_RAMP, layerRampIndex(layer, nLayers));
}

/** Text colour readable on a CSS colour given as `#rrggbb` or `rgb(r, g, b)`: near-black on light colours, white on dark. */
export function textOn(css: string): string {
  const hex = /^#([0-9a-f]{6})$/i.exec(css);
  const rgb = /^rgb\((\d+),\s*(\d+),\s*(\d+)\)$/.exec(css);
  const [r, g, b] = hex ? hexToRgb(css) : rgb ? [Number(rgb[1]), Number(rgb[2]), Number(rgb[3])] : [0, 0, 0];
  const luminance = 0.2126 * toLinear(r) + 0.7152 * toLinear(g) + 0.0722 * toLinear(b);
  return luminance > 0.3 ? "#111" : "#fff";
}
