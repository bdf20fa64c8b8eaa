// The one bundle for every circuitwidgets view.
//
// Each Python widget class sets a `_view` trait; `render` hands the model and
// element to that view. One module for all views keeps exported HTML pages to
// a single copy of the code however many widgets they hold.

import type { RenderProps } from "@anywidget/types";
import { renderAttention } from "./views/attention";
import { renderComposition } from "./views/composition";
import { renderEigen } from "./views/eigen";
import { renderExplorer } from "./views/explorer";
import { renderSkipTrigrams } from "./views/skiptrigrams";
import { renderTermImportance } from "./views/termimportance";

type ViewRender = (props: RenderProps<any>) => void | (() => void);

/** `_view` trait value → view. */
export const VIEWS: Readonly<Record<string, ViewRender>> = {
  attention: renderAttention,
  composition: renderComposition,
  eigen: renderEigen,
  explorer: renderExplorer,
  skiptrigrams: renderSkipTrigrams,
  termimportance: renderTermImportance,
};

function render(props: RenderProps): void | (() => void) {
  const name = props.model.get("_view");
  const view = typeof name === "string" ? VIEWS[name] : undefined;
  if (view === undefined) {
    props.el.textContent = `circuitwidgets: unknown view ${JSON.stringify(name)}; the Python package and its bundled JavaScript may be out of step (rebuild with \`npm --prefix js run build\`).`;
    return;
  }
  const cleanup = view(props);
  adoptStylesIntoShadowRoot(props.el);
  return cleanup;
}

/**
 * Views add their stylesheet to `document.head`; hosts that render widgets in
 * a shadow root (marimo) keep those rules out, so copy ours in.
 */
function adoptStylesIntoShadowRoot(el: HTMLElement): void {
  const root = el.getRootNode();
  if (!(root instanceof ShadowRoot)) return;
  for (const style of Array.from(document.head.querySelectorAll<HTMLStyleElement>('style[id^="cw-"]'))) {
    if (root.querySelector(`style#${CSS.escape(style.id)}`) === null) root.appendChild(style.cloneNode(true));
  }
}

export default { render };
