// Pointer, wheel and keyboard on the attention view: thumbnails select a
// head, tokens and cells select destinations and sources, the canvas zooms
// (Ctrl/⌘ + wheel, or wheel once focused), pans by dragging, resets on
// double-click; hover is front-end only.

import type { AnyModel } from "@anywidget/types";
import { wheelZooms } from "../../lib/attentionui";
import { listen } from "../../lib/dom";
import { NONE, setTraits, toggle } from "../../lib/selection";
import { fullView, panBy, type Viewport, zoomAt } from "../../lib/viewport";
import { type Hover, hitTest, type Layout, type Sel } from "./layout";
import { Thumbs } from "./thumbs";
import { TokenStrip } from "./tokens";

/** What the handlers read and change. */
export interface Host {
  model: AnyModel<Record<string, unknown>>;
  canvas: HTMLCanvasElement;
  tokenBox: HTMLElement;
  thumbs: HTMLElement;
  /** Tokens (0 without data). */
  n(): number;
  sel(): Sel | null;
  layout(): Layout;
  view(): Viewport;
  setView(view: Viewport): void;
  hover(): Hover;
  setHover(hover: Hover): void;
  hoverMode(): "dest" | "src";
  scrollToToken(i: number): void;
  redraw(): void;
}

/** The canvas point of a mouse event in layout px (the canvas may be drawn smaller than its layout). */
function canvasPoint(host: Host, event: MouseEvent): { x: number; y: number } {
  const rect = host.canvas.getBoundingClientRect();
  const k = rect.width > 0 ? host.layout().width / rect.width : 1;
  return { x: (event.clientX - rect.left) * k, y: (event.clientY - rect.top) * k };
}

function setHoverIfChanged(host: Host, next: Hover): void {
  const h = host.hover();
  if (next.dest !== h.dest || next.src !== h.src) {
    host.setHover(next);
    host.redraw();
  }
}

/** Listen to everything; returns the cleanups. */
export function bindEvents(host: Host): (() => void)[] {
  const { model, canvas, tokenBox, thumbs } = host;
  let drag: { x: number; y: number; view: Viewport; moved: boolean } | null = null;
  const none: Hover = { dest: NONE, src: NONE };
  return [
    listen(thumbs, "click", (event) => {
      const lh = Thumbs.headOf(event);
      if (lh === null) return;
      setTraits(model, { selected_layer: lh[0], selected_head: lh[1] });
      host.redraw();
    }),
    listen(tokenBox, "click", (event) => {
      const i = TokenStrip.indexOf(event);
      if (i === NONE) return;
      if (host.hoverMode() === "src") setTraits(model, { selected_src: toggle(model.get("selected_src") as number, i) });
      else setTraits(model, { selected_dest: toggle(model.get("selected_dest") as number, i) });
      host.redraw();
    }),
    listen(tokenBox, "mouseover", (event) => {
      const i = TokenStrip.indexOf(event);
      setHoverIfChanged(host, host.hoverMode() === "src" ? { dest: NONE, src: i } : { dest: i, src: NONE });
    }),
    listen(tokenBox, "mouseleave", () => setHoverIfChanged(host, none)),
    listen(canvas, "pointerdown", (event) => {
      if (event.button !== 0) return;
      drag = { ...canvasPoint(host, event), view: host.view(), moved: false };
      canvas.setPointerCapture?.(event.pointerId);
    }),
    listen(canvas, "pointermove", (event) => {
      if (host.n() === 0) return;
      const pt = canvasPoint(host, event);
      const L = host.layout();
      if (drag !== null) {
        const dx = pt.x - drag.x;
        const dy = pt.y - drag.y;
        if (!drag.moved && Math.hypot(dx, dy) > 3) {
          drag.moved = true;
          canvas.classList.add("cw-dragging");
        }
        if (drag.moved) {
          const cellPx = L.size / drag.view.size;
          host.setView(panBy(drag.view, host.n(), -dy / cellPx, -dx / cellPx));
          return;
        }
      }
      const hit = hitTest(L, host.view(), pt.x, pt.y);
      const next =
        hit === null ? none : hit.area === "cell" ? { dest: hit.row, src: hit.col } : hit.area === "col" ? { dest: NONE, src: hit.col } : { dest: hit.row, src: NONE };
      setHoverIfChanged(host, next);
    }),
    listen(canvas, "pointerup", (event) => {
      const wasDrag = drag?.moved === true;
      drag = null;
      canvas.classList.remove("cw-dragging");
      if (wasDrag || host.n() === 0) return;
      const pt = canvasPoint(host, event);
      const hit = hitTest(host.layout(), host.view(), pt.x, pt.y);
      if (hit === null) return;
      const s = host.sel();
      if (hit.area === "cell") {
        const same = s !== null && s.dest === hit.row && s.src === hit.col;
        setTraits(model, same ? { selected_dest: NONE, selected_src: NONE } : { selected_dest: hit.row, selected_src: hit.col });
        if (!same) host.scrollToToken(hit.row);
      } else if (hit.area === "col") setTraits(model, { selected_src: toggle(model.get("selected_src") as number, hit.col) });
      else setTraits(model, { selected_dest: toggle(model.get("selected_dest") as number, hit.row), selected_src: NONE });
      host.redraw();
    }),
    listen(canvas, "pointerleave", () => {
      if (drag === null) setHoverIfChanged(host, none);
    }),
    listen(canvas, "dblclick", () => host.setView(fullView(host.n()))),
    listen(canvas, "wheel", (event) => {
      const n = host.n();
      if (n <= 8) return;
      const L = host.layout();
      const pt = canvasPoint(host, event);
      const fx = (pt.x - L.left) / L.size;
      const fy = (pt.y - L.top) / L.size;
      if (!(fx >= 0 && fx < 1 && fy >= 0 && fy < 1)) return;
      if (!wheelZooms(event, canvas.matches(":focus"))) return; // the page scrolls
      event.preventDefault();
      const factor = Math.exp(Math.max(-0.5, Math.min(0.5, event.deltaY * 0.002)));
      host.setView(zoomAt(host.view(), n, factor, fy, fx));
    }),
    listen(canvas, "keydown", (event) => onKey(host, event)),
  ];
}

function onKey(host: Host, event: KeyboardEvent): void {
  const s = host.sel();
  const n = host.n();
  if (s === null || n === 0) return;
  const { model } = host;
  const clampIdx = (i: number) => Math.max(0, Math.min(n - 1, i));
  const view = host.view();
  let handled = true;
  switch (event.key) {
    case "ArrowUp":
    case "ArrowDown":
      setTraits(model, { selected_dest: clampIdx((s.dest === NONE ? 0 : s.dest) + (event.key === "ArrowUp" ? -1 : 1)) });
      break;
    case "ArrowLeft":
    case "ArrowRight":
      setTraits(model, { selected_src: clampIdx((s.src === NONE ? 0 : s.src) + (event.key === "ArrowLeft" ? -1 : 1)) });
      break;
    case "+":
    case "=":
      host.setView(zoomAt(view, n, 0.7, 0.5, 0.5));
      break;
    case "-":
      host.setView(zoomAt(view, n, 1 / 0.7, 0.5, 0.5));
      break;
    case "0":
      host.setView(fullView(n));
      break;
    case "Escape":
      setTraits(model, { selected_dest: NONE, selected_src: NONE });
      break;
    default:
      handled = false;
  }
  if (handled) {
    event.preventDefault();
    host.redraw();
  }
}
