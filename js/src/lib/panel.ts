// The frame shared by the weight-space views: a title line with the export
// toolbar, a body, and a status line (`[data-cw-status]`) saying in words what
// is selected. Also the shared CSS of buttons, segmented controls and notes.

import type { AnyModel } from "@anywidget/types";
import "../styles/panel.css";
import { el } from "./dom";
import { exportToolbar, noExport } from "./export";
import { onTraits } from "./selection";
import { visibleLabel } from "./tokens";


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
  root.classList.add("cw-panel", className);
  root.dataset.cwView = view;
  const head = el(doc, "div", "cw-head");
  const title = el(doc, "div", "cw-title");
  const subtitle = el(doc, "span", "cw-subtitle");
  const toolbar = exportToolbar(doc, view, () => root, exportSuffix);
  head.append(title, toolbar.element);
  // the controls and the status line are the tool, not the figure: left out of exports
  const controls = noExport(el(doc, "div", "cw-controls"));
  const body = el(doc, "div", "cw-body");
  const status = noExport(el(doc, "div", "cw-status"));
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
  panel.title.textContent = visibleLabel(main);
  if (sub) {
    panel.subtitle.textContent = ` ${visibleLabel(sub)}`;
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
  wrap.append(doc.createTextNode(`${visibleLabel(label)} `));
  const group = el(doc, "span", "cw-segmented");
  group.setAttribute("role", "group");
  const buttons = options.map((o) => {
    const b = el(doc, "button", "cw-button", visibleLabel(o.label));
    b.type = "button";
    b.dataset.value = o.value;
    if (o.title) b.title = visibleLabel(o.title);
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

/** Show why a view's data could not be read (as text) in its status line. */
export function showError(panel: Panel, err: unknown): void {
  panel.status.textContent = err instanceof Error ? err.message : String(err);
  panel.status.classList.add("cw-error");
}

/** Clear a shown error (the data read fine). */
export function clearError(panel: Panel): void {
  panel.status.classList.remove("cw-error");
}

/**
 * Schedule `frame` whenever `root`'s width changes, for a view whose layout
 * follows its width: JupyterLab renders a view before attaching it (width 0,
 * drawn at a fallback width), and a window or a notebook can be resized. Without
 * it the first click's redraw would move every cell from under the pointer.
 * Returns the cleanup.
 */
export function redrawOnResize(root: HTMLElement, frame: { schedule(): void }): () => void {
  const Resize = root.ownerDocument.defaultView?.ResizeObserver;
  if (Resize === undefined) return () => {};
  let width = root.clientWidth;
  const observer = new Resize(() => {
    if (root.clientWidth === width) return;
    width = root.clientWidth;
    frame.schedule();
  });
  observer.observe(root);
  return () => observer.disconnect();
}

/**
 * The rest of every view's life after it has built its DOM: read the data now
 * and whenever one of `data` changes, draw now and once per frame after any of
 * `data` or `redraw` changes. Returns the view's cleanup: the pending frame,
 * `cleanups` (its listeners) and the panel.
 */
export function runView<T extends Record<string, unknown>>(
  model: AnyModel<T>,
  panel: Panel,
  frame: { schedule(): void; cancel(): void },
  cleanups: (() => void)[],
  keys: { data: readonly (keyof T & string)[]; redraw: readonly (keyof T & string)[] },
  load: () => void,
  draw: () => void,
): () => void {
  cleanups.push(
    onTraits(model, keys.data, () => {
      load();
      frame.schedule();
    }),
    onTraits(model, keys.redraw, frame.schedule),
  );
  load();
  draw();
  return () => {
    frame.cancel();
    for (const c of cleanups) c();
    panel.cleanup();
  };
}

