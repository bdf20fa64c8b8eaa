// Save a view as SVG or PNG.
//
// `snapshotSvg` redraws the rendered view as one SVG document (lib/snapshot.ts
// walks the layout); PNG is that SVG rasterised at 1×, 2× or 3× its size.
//
// An export is the figure alone: plot, axes, legend, colour bar, title.
// Whatever is marked `data-cw-no-export` (the toolbar, the controls row, the
// status line, hints such as "Ctrl/⌘ + wheel to zoom") is taken out of the
// layout while the snapshot is taken (synchronously, so nothing flickers).

import { el, listen } from "./dom";
import { snapshotLayout } from "./snapshot";

export { parseLinearGradient } from "./snapshot";

/** Elements marked with this attribute (the toolbar, controls, status, hints) are left out of exports. */
export const NO_EXPORT = "data-cw-no-export";

/** PNG scales offered (× the view's CSS size). */
export const PNG_SCALES = [1, 2, 3] as const;

/** Mark `node` as not part of the figure (left out of SVG and PNG exports). */
export function noExport<T extends Element>(node: T): T {
  node.setAttribute(NO_EXPORT, "");
  return node;
}

/**
 * Run `fn` with every `[data-cw-no-export]` element under `root` taken out of
 * the layout (`display: none`), then put them back exactly as they were.
 */
export function withoutControls<T>(root: HTMLElement, fn: () => T): T {
  const hidden = [...root.querySelectorAll<HTMLElement>(`[${NO_EXPORT}]`)].map((e) => [e, e.style.getPropertyValue("display"), e.style.getPropertyPriority("display")] as const);
  for (const [e] of hidden) e.style.setProperty("display", "none", "important");
  try {
    return fn();
  } finally {
    for (const [e, value, priority] of hidden) {
      if (value) e.style.setProperty("display", value, priority);
      else e.style.removeProperty("display");
    }
  }
}

/**
 * The view under `root` as an SVG document (a string). Layout comes from the
 * live page, so call it on a rendered, visible view.
 */
export function snapshotSvg(root: HTMLElement): string {
  return withoutControls(root, () => snapshotLayout(root, (e) => e.hasAttribute(NO_EXPORT)));
}

/** Rasterise an SVG document to a PNG blob at `scale` × its size (1, 2 or 3 for papers). */
export async function svgToPng(doc: Document, svgText: string, scale = 2): Promise<Blob> {
  const sizes = /<svg[^>]*\swidth="([\d.]+)"[^>]*\sheight="([\d.]+)"/.exec(svgText);
  const width = Number(sizes?.[1] ?? 800);
  const height = Number(sizes?.[2] ?? 600);
  const image = new (doc.defaultView?.Image ?? Image)();
  const loaded = new Promise<void>((resolve, reject) => {
    image.onload = () => resolve();
    image.onerror = () => reject(new Error("circuitwidgets: the SVG snapshot could not be rasterised"));
  });
  image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svgText)}`;
  await loaded;
  const canvas = doc.createElement("canvas");
  canvas.width = Math.round(width * scale);
  canvas.height = Math.round(height * scale);
  const ctx = canvas.getContext("2d");
  if (ctx === null) throw new Error("circuitwidgets: no 2D canvas to rasterise on");
  ctx.scale(scale, scale);
  ctx.drawImage(image, 0, 0, width, height);
  return new Promise((resolve, reject) =>
    canvas.toBlob((blob) => (blob ? resolve(blob) : reject(new Error("circuitwidgets: PNG encoding failed"))), "image/png"),
  );
}

/**
 * Least milliseconds between two downloads from one document. Chromium drops,
 * silently, the 11th download a frame asks for within a second of the first of
 * a burst (blink's burst download throttle: 10 per second); a page of many
 * views, each saved in turn, lost one file in eleven. Spaced at more than
 * 1/10 s, ten downloads always span more than a second, so none is dropped.
 */
export const DOWNLOAD_GAP_MS = 120;

/** When each document may next start a download (`performance.now()`, ms). */
const nextDownload = new WeakMap<Document, number>();

/** Offer `blob` as a download named `filename`: at once, or after the document's previous one by `DOWNLOAD_GAP_MS`. */
export function download(doc: Document, blob: Blob, filename: string): void {
  const now = performance.now();
  const at = Math.max(now, nextDownload.get(doc) ?? now);
  nextDownload.set(doc, at + DOWNLOAD_GAP_MS);
  if (at <= now) saveNow(doc, blob, filename);
  else setTimeout(() => saveNow(doc, blob, filename), at - now);
}

/** Click a hidden link to `blob` (the link and, after a while, its object URL are removed). */
function saveNow(doc: Document, blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = doc.createElement("a");
  a.href = url;
  a.download = filename;
  a.style.display = "none";
  doc.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** A file name for a view's export: letters, digits, dashes. */
export function exportName(view: string, suffix: string, extension: "svg" | "png"): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "");
  return [clean(`circuitwidgets-${view}`), clean(suffix)].filter(Boolean).join("-") + `.${extension}`;
}

/**
 * A small "SVG · PNG [1×|2×|3×]" toolbar saving `target()` (the view's root). Returns the
 * element and its cleanup. The toolbar itself is left out of the exports.
 */
export function exportToolbar(
  doc: Document,
  view: string,
  target: () => HTMLElement,
  suffix: () => string = () => "",
): { element: HTMLDivElement; cleanup: () => void } {
  const bar = el(doc, "div", "cw-toolbar");
  bar.setAttribute(NO_EXPORT, "");
  const svgButton = el(doc, "button", "cw-button cw-small", "SVG");
  svgButton.type = "button";
  svgButton.dataset.cwExport = "svg";
  svgButton.title = "Save this view as SVG";
  const pngButton = el(doc, "button", "cw-button cw-small", "PNG");
  pngButton.type = "button";
  pngButton.dataset.cwExport = "png";
  pngButton.title = "Save the figure (plot, axes, legend, colour bar, title; no controls) as PNG";
  svgButton.title = "Save the figure (plot, axes, legend, colour bar, title; no controls) as SVG";
  const scaleSelect = el(doc, "select", "cw-export-scale");
  scaleSelect.dataset.cwExportScale = "";
  scaleSelect.title = "PNG resolution (× the size on screen)";
  scaleSelect.setAttribute("aria-label", "PNG resolution");
  for (const k of PNG_SCALES) {
    const option = el(doc, "option", undefined, `${k}×`);
    option.value = String(k);
    scaleSelect.append(option);
  }
  scaleSelect.value = "2";
  bar.append(svgButton, pngButton, scaleSelect);
  const failed = (err: unknown) => {
    bar.title = err instanceof Error ? err.message : String(err);
    bar.classList.add("cw-error");
  };
  const cleanups = [
    listen(svgButton, "click", () => {
      try {
        const text = snapshotSvg(target());
        download(doc, new Blob([text], { type: "image/svg+xml" }), exportName(view, suffix(), "svg"));
      } catch (err) {
        failed(err);
      }
    }),
    listen(pngButton, "click", () => {
      const scale = Number(scaleSelect.value) || 2;
      svgToPng(doc, snapshotSvg(target()), scale)
        .then((blob) => download(doc, blob, exportName(view, [suffix(), `${scale}x`].filter(Boolean).join("-"), "png")))
        .catch(failed);
    }),
  ];
  return { element: bar, cleanup: () => cleanups.forEach((c) => c()) };
}
