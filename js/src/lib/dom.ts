// Small DOM helpers. Text goes in with textContent only.

/** Create an element with a class name and optional text (set as text, never HTML). */
export function el<K extends keyof HTMLElementTagNameMap>(
  doc: Document,
  tag: K,
  className?: string,
  text?: string,
): HTMLElementTagNameMap[K] {
  const node = doc.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * Add a stylesheet to the document once (keyed by `id`); returns the style element.
 * An existing one with other text is updated, so a hot-reloaded bundle's styles apply.
 */
export function ensureStyle(doc: Document, id: string, css: string): HTMLStyleElement {
  const existing = doc.getElementById(id);
  if (existing instanceof HTMLStyleElement) {
    if (existing.textContent !== css) existing.textContent = css;
    return existing;
  }
  const style = doc.createElement("style");
  style.id = id;
  style.textContent = css;
  doc.head.appendChild(style);
  return style;
}

/** addEventListener that returns its own removal, for view cleanup. */
export function listen<K extends keyof HTMLElementEventMap>(
  target: HTMLElement,
  type: K,
  handler: (event: HTMLElementEventMap[K]) => void,
): () => void {
  target.addEventListener(type, handler);
  return () => target.removeEventListener(type, handler);
}
