// CircuitExplorer view: the eigenvalue scatter, attention patterns,
// composition map, skip-trigram table, term importance and head scores of one model in one
// widget, linked through the shared selection traits `selected_layer` /
// `selected_head`.
//
// Each view renders unchanged on a `scopedModel` (lib/scoped.ts) that maps its
// trait names onto the explorer's: data from `<view>_data`, its own state from
// `<prefix><name>`, the head selection shared. Because every view listens to
// the same shared traits, choosing a head anywhere updates all of them in the
// browser, with or without a kernel.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray } from "../lib/arrays";
import { el } from "../lib/dom";
import { makePanel, setTitle } from "../lib/panel";
import { childSpecs, scopedModel } from "../lib/scoped";
import { indexOr, onTraits } from "../lib/selection";
import { fmt, headName } from "../lib/svg";
import { renderAttention } from "./attention";
import { renderComposition } from "./composition";
import { renderEigen } from "./eigen";
import { renderHeadScores } from "./headscores";
import { renderSkipTrigrams } from "./skiptrigrams";
import { renderTermImportance } from "./termimportance";
import "../styles/explorer.css";

type Render = (props: RenderProps<any>) => void | (() => void);

/** The views the explorer can show, and their place in its grid (explorer.css). */
export const RENDERS: Readonly<Record<string, { render: Render; area: string }>> = {
  eigen: { render: renderEigen, area: "eigen" },
  attention: { render: renderAttention, area: "attention" },
  composition: { render: renderComposition, area: "composition" },
  skiptrigrams: { render: renderSkipTrigrams, area: "trigrams" },
  termimportance: { render: renderTermImportance, area: "terms" },
  headscores: { render: renderHeadScores, area: "heads" },
};

/** Shared head selection as the explorer holds it, checked against the eigen data. */
function headCount(model: AnyModel): { nLayers: number; nHeads: number } {
  const data = model.get("eigen_data" as never) as { scores?: unknown } | undefined;
  try {
    const shape = data?.scores ? decodeArray(data.scores as never).shape : [];
    return { nLayers: shape[2] ?? 0, nHeads: shape[3] ?? 0 };
  } catch {
    return { nLayers: 0, nHeads: 0 };
  }
}

/** A sentence on the selected head's detector scores (from the eigen data). */
function detectorSummary(model: AnyModel, layer: number, head: number): string {
  const data = model.get("eigen_data" as never) as { detectors?: unknown } | undefined;
  try {
    const d = decodeArray(data?.detectors as never);
    const [, L = 0, H = 0] = d.shape;
    const at = (k: number) => d.data[(k * L + layer) * H + head] as number;
    return `previous-token ${fmt(at(0))}, induction ${fmt(at(1))}, duplicate-token ${fmt(at(2))}`;
  } catch {
    return "";
  }
}

export function renderExplorer(props: RenderProps): () => void {
  const { model, el: root } = props;
  const doc = root.ownerDocument;
  const m = model as AnyModel;
  const panel = makePanel(root, "explorer", "cw-explorer", () => {
    const { nLayers, nHeads } = headCount(m);
    return headName(indexOr(m.get("selected_layer" as never), nLayers, 0), indexOr(m.get("selected_head" as never), nHeads, 0));
  });
  panel.root.insertBefore(panel.status, panel.body);
  const cleanups: (() => void)[] = [];

  // where each child's traits live comes from the kernel (derived from the widgets' definitions)
  for (const child of childSpecs(m.get("_children" as never))) {
    const cell = el(doc, "section", "cw-cell");
    const viewRoot = el(doc, "div");
    cell.append(viewRoot);
    panel.body.append(cell);
    const known = RENDERS[child.view];
    if (known === undefined) {
      viewRoot.textContent = `circuitwidgets: unknown view ${JSON.stringify(child.view)} in the explorer; the Python package and its bundled JavaScript may be out of step.`;
      continue;
    }
    cell.style.gridArea = known.area;
    try {
      const cleanup = known.render({ ...props, model: scopedModel(m, child), el: viewRoot });
      if (typeof cleanup === "function") cleanups.push(cleanup);
    } catch (err) {
      viewRoot.textContent = `circuitwidgets: the ${child.view} view failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  }

  function update(): void {
    const { nLayers, nHeads } = headCount(m);
    const layer = indexOr(m.get("selected_layer" as never), nLayers, 0);
    const head = indexOr(m.get("selected_head" as never), nHeads, 0);
    setTitle(panel, "Circuit explorer", String(m.get("model_name" as never) ?? ""));
    const summary = detectorSummary(m, layer, head);
    panel.status.textContent = `${headName(layer, head)} selected${summary ? ` (${summary})` : ""}; choose a head in any view`;
  }

  cleanups.push(onTraits(m, ["selected_layer", "selected_head", "eigen_data", "model_name"] as never[], update));
  update();

  return () => {
    for (const c of cleanups) c();
    panel.cleanup();
  };
}
