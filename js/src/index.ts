// The one bundle for every circuitwidgets view.
//
// Each Python widget class sets a `_view` trait; `render` hands the model and
// element to that view. One module for all views keeps exported HTML pages to
// a single copy of the code however many widgets they hold. The views'
// stylesheets (styles/*.css) are bundled by esbuild into static/index.css,
// the widgets' `_css`: anywidget adds it to the page (or the host's shadow
// root), and exported pages inline it.

import type { RenderProps } from "@anywidget/types";
import { safeModel } from "./lib/safemodel";
import { renderAttention } from "./views/attention";
import { renderComposition } from "./views/composition";
import { renderCompVsPatching } from "./views/compvspatching";
import { renderEigen } from "./views/eigen";
import { renderExplorer } from "./views/explorer";
import { renderGraph } from "./views/graph";
import { renderFeatureDashboard } from "./views/features/dashboard";
import { renderPromptFeatures } from "./views/features/prompt";
import { renderGrokking } from "./views/grokking";
import { renderHeadScores } from "./views/headscores";
import { renderHistory } from "./views/history";
import { renderLogitAttribution } from "./views/logitattribution";
import { renderLogitLens } from "./views/logitlens";
import { renderNeuronSparsity } from "./views/neuronsparsity";
import { renderPatchingMap } from "./views/patchingmap";
import { renderSkipTrigrams } from "./views/skiptrigrams";
import { renderSuperposition } from "./views/superposition";
import { renderTermImportance } from "./views/termimportance";

type ViewRender = (props: RenderProps<any>) => void | (() => void);

/** `_view` trait value → view. */
export const VIEWS: Readonly<Record<string, ViewRender>> = {
  attention: renderAttention,
  composition: renderComposition,
  compvspatching: renderCompVsPatching,
  eigen: renderEigen,
  explorer: renderExplorer,
  graph: renderGraph,
  featuredashboard: renderFeatureDashboard,
  grokking: renderGrokking,
  headscores: renderHeadScores,
  history: renderHistory,
  logitattribution: renderLogitAttribution,
  logitlens: renderLogitLens,
  neuronsparsity: renderNeuronSparsity,
  patchingmap: renderPatchingMap,
  promptfeatures: renderPromptFeatures,
  skiptrigrams: renderSkipTrigrams,
  superposition: renderSuperposition,
  termimportance: renderTermImportance,
};

function render(props: RenderProps): void | (() => void) {
  const name = props.model.get("_view");
  const view = typeof name === "string" ? VIEWS[name] : undefined;
  if (view === undefined) {
    props.el.textContent = `circuitwidgets: unknown view ${JSON.stringify(name)}; the Python package and its bundled JavaScript may be out of step (rebuild with \`npm --prefix js run build\`).`;
    return;
  }
  // every string a view reads from its model (traits, kernel messages) comes escaped: one path for all views
  return view({ ...props, model: safeModel(props.model) });
}

export default { render };
