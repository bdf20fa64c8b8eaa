// Pure helpers of the training-history view: series, domains, and the words
// for the phase change. No DOM, so vitest checks them directly.

/** The curves drawn for the selected head, in legend order. */
export const HEAD_CURVES = [
  { key: "previous_token", label: "previous-token score", colour: "#0072B2", dash: "" },
  { key: "induction", label: "induction score", colour: "#D55E00", dash: "" },
  { key: "ov_copying", label: "OV copying score", colour: "#009E73", dash: "5 3" },
  { key: "k_composition", label: "strongest K-composition − baseline", colour: "#CC79A7", dash: "2 2" },
] as const;

export type CurveKey = (typeof HEAD_CURVES)[number]["key"];

/** The head's value at each evaluation from a `[T, L, H]` array (row-major). */
export function headSeries(data: ArrayLike<number>, nEvals: number, nLayers: number, nHeads: number, layer: number, head: number): number[] {
  const out: number[] = [];
  if (layer < 0 || head < 0 || layer >= nLayers || head >= nHeads) return out;
  for (let t = 0; t < nEvals; t++) out.push(Number(data[(t * nLayers + layer) * nHeads + head]));
  return out;
}

/** A y domain covering every finite value of `series` (and `include`), padded by 5 %. */
export function seriesDomain(series: readonly (readonly number[])[], include: readonly number[] = []): [number, number] {
  const values = [...series.flat(), ...include].filter(Number.isFinite);
  if (!values.length) return [0, 1];
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

/** Polyline points of a series against steps, skipping NaN (a break starts a new run). */
export function polylineRuns(steps: readonly number[], values: readonly number[], x: (v: number) => number, y: (v: number) => number): string[] {
  const runs: string[] = [];
  let current: string[] = [];
  steps.forEach((s, i) => {
    const v = values[i];
    if (v === undefined || !Number.isFinite(v)) {
      if (current.length) runs.push(current.join(" "));
      current = [];
      return;
    }
    current.push(`${x(s).toFixed(1)},${y(v).toFixed(1)}`);
  });
  if (current.length) runs.push(current.join(" "));
  return runs;
}

/** The sentence under the charts that names the phase change. */
export function formationText(formation: readonly number[]): string {
  if (formation.length !== 3) return "No induction heads formed in this run (the best induction score never rose).";
  const [start, step, end] = formation;
  return `Induction heads form around step ${step}: the best induction score rose fastest between steps ${start} and ${end} (shaded), most steeply at step ${step}.`;
}

/** Whether a series has any finite value (older training logs lack some curves). */
export function isLogged(values: readonly number[]): boolean {
  return values.some(Number.isFinite);
}

/**
 * The legend label of a series: its name, marked "not logged" when it has no
 * finite value, so an empty chart reads as missing data rather than a flat zero.
 * A K-composition curve is empty by definition in layer 0 (no earlier layer).
 */
export function seriesLabel(label: string, values: readonly number[], why = "not logged for this model"): string {
  return isLogged(values) ? label : `${label} (${why})`;
}
