// The frame shared by the weight-space views: a title line with the export
// toolbar, a body, and a status line (`[data-cw-status]`) saying in words what
// is selected. Also the shared CSS of buttons, segmented controls and notes.

import { el, ensureStyle } from "./dom";
import { exportToolbar } from "./export";

const CSS = `
.cw-panel { font: 13px/1.4 var(--jp-ui-font-family, system-ui, -apple-system, "Segoe UI", sans-serif); color: var(--jp-ui-font-color1, #222); box-sizing: border-box; }
.cw-panel * { box-sizing: border-box; }
.cw-panel .cw-head { display: flex; align-items: baseline; gap: 12px; margin-bottom: 6px; }
.cw-panel .cw-title { font-weight: 600; font-size: 14px; flex: 1 1 auto; }
.cw-panel .cw-subtitle { font-weight: 400; opacity: 0.7; font-size: 12px; }
.cw-panel .cw-toolbar { display: flex; gap: 4px; flex: 0 0 auto; }
.cw-panel .cw-toolbar.cw-error { outline: 1px solid #b2182b; }
.cw-panel .cw-controls { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin: 4px 0 8px; font-size: 12px; }
.cw-panel .cw-controls label { display: inline-flex; gap: 4px; align-items: center; }
.cw-panel .cw-button { font: inherit; font-size: 12px; padding: 2px 8px; border: 1px solid var(--jp-border-color1, #bbb); border-radius: 3px; background: var(--jp-layout-color1, #fff); color: inherit; cursor: pointer; }
.cw-panel .cw-button:hover { border-color: #666; }
.cw-panel .cw-button:disabled { opacity: 0.45; cursor: default; }
.cw-panel .cw-button.cw-small { font-size: 11px; padding: 1px 6px; }
.cw-panel .cw-segmented { display: inline-flex; }
.cw-panel .cw-segmented .cw-button { border-radius: 0; margin-left: -1px; }
.cw-panel .cw-segmented .cw-button:first-child { border-radius: 3px 0 0 3px; margin-left: 0; }
.cw-panel .cw-segmented .cw-button:last-child { border-radius: 0 3px 3px 0; }
.cw-panel .cw-segmented .cw-button[aria-pressed="true"] { background: #0072B2; border-color: #0072B2; color: #fff; }
.cw-panel .cw-status { font-size: 12px; min-height: 1.4em; margin-top: 6px; color: var(--jp-ui-font-color1, #222); }
.cw-panel .cw-note { font-size: 11.5px; opacity: 0.8; margin-top: 4px; }
.cw-panel .cw-message { font-size: 12px; padding: 4px 8px; margin: 4px 0; border-left: 3px solid #E69F00; background: #fff8e6; }
.cw-panel .cw-message:empty { display: none; }
.cw-panel .cw-error { color: #b2182b; }
.cw-panel svg { display: block; overflow: visible; }
.cw-panel [data-cw-head] { cursor: pointer; }
.cw-panel select, .cw-panel input[type="search"], .cw-panel input[type="text"] { font: inherit; font-size: 12px; padding: 1px 4px; }
`;

export interface Panel {
  root: HTMLElement;
  title: HTMLDivElement;
  subtitle: HTMLSpanElement;
  controls: HTMLDivElement;
  body: HTMLDivElement;
  status: HTMLDivElement;
  cleanup: () => void;
}

/**
 * Set up `root` as a view: `data-cw-view`, title line with the SVG/PNG
 * toolbar, a controls row, a body and a status line.
 */
export function makePanel(root: HTMLElement, view: string, className: string, exportSuffix: () => string = () => ""): Panel {
  const doc = root.ownerDocument;
  ensureStyle(doc, "cw-panel-style", CSS);
  root.classList.add("cw-panel", className);
  root.dataset.cwView = view;
  const head = el(doc, "div", "cw-head");
  const title = el(doc, "div", "cw-title");
  const subtitle = el(doc, "span", "cw-subtitle");
  const toolbar = exportToolbar(doc, view, () => root, exportSuffix);
  head.append(title, toolbar.element);
  const controls = el(doc, "div", "cw-controls");
  const body = el(doc, "div", "cw-body");
  const status = el(doc, "div", "cw-status");
  status.dataset.cwStatus = "";
  status.setAttribute("aria-live", "polite");
  root.append(head, controls, body, status);
  return {
    root,
    title,
    subtitle,
    controls,
    body,
    status,
    cleanup: () => {
      toolbar.cleanup();
      root.replaceChildren();
      root.classList.remove("cw-panel", className);
      delete root.dataset.cwView;
    },
  };
}

/** Set a title: main text plus a dimmer subtitle, both as text. */
export function setTitle(panel: Panel, main: string, sub = ""): void {
  panel.title.textContent = main;
  if (sub) {
    panel.subtitle.textContent = ` ${sub}`;
    panel.title.append(panel.subtitle);
  }
}

/** A segmented control (one button per option); `onPick` gets the option's value. */
export function segmented(
  doc: Document,
  label: string,
  options: readonly { value: string; label: string; title?: string }[],
  onPick: (value: string) => void,
): { element: HTMLLabelElement; update: (value: string) => void; cleanup: () => void } {
  const wrap = el(doc, "label");
  wrap.append(doc.createTextNode(`${label} `));
  const group = el(doc, "span", "cw-segmented");
  group.setAttribute("role", "group");
  const buttons = options.map((o) => {
    const b = el(doc, "button", "cw-button", o.label);
    b.type = "button";
    b.dataset.value = o.value;
    if (o.title) b.title = o.title;
    return b;
  });
  group.append(...buttons);
  wrap.append(group);
  const handler = (event: Event) => {
    const b = (event.target as Element | null)?.closest?.("button");
    if (b instanceof HTMLButtonElement && b.dataset.value !== undefined) {
      event.preventDefault();
      onPick(b.dataset.value);
    }
  };
  group.addEventListener("click", handler);
  return {
    element: wrap,
    update: (value: string) => buttons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.value === value))),
    cleanup: () => group.removeEventListener("click", handler),
  };
}
