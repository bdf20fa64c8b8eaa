// Axes of a heatmap whose cells are heads grouped by layer (the composition
// maps: 992 earlier × 992 later heads at 32 × 32). Labels never collide:
// layers are shaded as alternating bands and every k-th layer is named, with
// k the smallest step that leaves each name its room; once cells are wide
// enough, heads are numbered too (every k-th head, then every head). No DOM.

/** A label along an axis: its text and the span (px from the axis start) it may take. */
export interface AxisMark {
  text: string;
  /** Centre, and the extent [from, to) the label's box occupies (px along the axis). */
  at: number;
  from: number;
  to: number;
}

/** A layer's stretch of the axis, clipped to what is shown. */
export interface LayerBand {
  layer: number;
  from: number;
  to: number;
}

export interface HeadAxis {
  bands: LayerBand[];
  layerMarks: AxisMark[];
  headMarks: AxisMark[];
  /** Every `layerStep`-th layer is named, every `headStep`-th head (0: heads unnamed). */
  layerStep: number;
  headStep: number;
  /** Width in px of one cell. */
  cell: number;
}

/** Steps tried for naming every k-th layer or head: round numbers a reader counts in. */
const STEPS = [1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 500, 1000];

/** Smallest step whose spacing (`step × unit` px) gives each label `need` px. */
export function labelStep(unit: number, need: number): number {
  if (!(unit > 0)) return Number.POSITIVE_INFINITY;
  return STEPS.find((k) => k * unit >= need) ?? Math.ceil(need / unit);
}

/**
 * Keep labels of `size` px centred at `centres` (in order) inside [0, length]
 * and apart: each is moved inside the axis, then dropped if it would overlap
 * the last one kept.
 */
export function spaceLabels(items: readonly { text: string; at: number; size: number }[], length: number): AxisMark[] {
  const out: AxisMark[] = [];
  for (const item of items) {
    const half = item.size / 2;
    if (item.size > length) continue;
    const at = Math.max(half, Math.min(length - half, item.at));
    const last = out[out.length - 1];
    if (last !== undefined && at - half < last.to) continue;
    out.push({ text: item.text, at, from: at - half, to: at + half });
  }
  return out;
}

/**
 * The axis of cells `start..start+count-1` drawn over `length` px, where
 * cell i is head `i % nHeads` of layer `firstLayer + floor(i / nHeads)`.
 * `layerSize(text)` and `headSize(text)` are the px a label needs along the
 * axis (its width on a horizontal axis, its height on a vertical one).
 */
export function headAxis(
  start: number,
  count: number,
  length: number,
  nHeads: number,
  firstLayer: number,
  layerSize: (text: string) => number,
  headSize: (text: string) => number,
): HeadAxis {
  const cell = count > 0 ? length / count : 0;
  const empty: HeadAxis = { bands: [], layerMarks: [], headMarks: [], layerStep: 0, headStep: 0, cell };
  if (count <= 0 || nHeads <= 0 || !(length > 0)) return empty;
  const end = start + count;
  const bands: LayerBand[] = [];
  for (let b = Math.floor(start / nHeads); b * nHeads < end; b++) {
    const from = Math.max(0, (b * nHeads - start) * cell);
    const to = Math.min(length, ((b + 1) * nHeads - start) * cell);
    bands.push({ layer: firstLayer + b, from, to });
  }
  // every k-th layer, k chosen for the widest name on the axis
  const widest = Math.max(...bands.map((b) => layerSize(`L${b.layer}`)));
  const layerStep = labelStep(nHeads * cell, widest + 4);
  const layerMarks = spaceLabels(
    bands.filter((b) => b.layer % layerStep === 0).map((b) => ({ text: `L${b.layer}`, at: (b.from + b.to) / 2, size: layerSize(`L${b.layer}`) + 4 })),
    length,
  );
  // heads once every k-th of them has room (k below nHeads, else the layer names say it all)
  const headStep = labelStep(cell, headSize(String(nHeads - 1)) + 3);
  const headMarks: AxisMark[] = [];
  if (headStep < nHeads) {
    const items = [];
    // counted from each layer's head 0, so a step that does not divide nHeads never drifts
    for (let i = start; i < end; i++) {
      const h = i % nHeads;
      if (h % headStep === 0) items.push({ text: String(h), at: (i - start + 0.5) * cell, size: headSize(String(h)) + 3 });
    }
    headMarks.push(...spaceLabels(items, length));
  }
  return { bands, layerMarks, headMarks, layerStep, headStep: headStep < nHeads ? headStep : 0, cell };
}
