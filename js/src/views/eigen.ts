// EigenScatter view: every head at (OV copying score, QK copying score),
// coloured by layer; the selected head's eigenvalues in the complex plane and
// its detector scores.
//
// Kernel → view: scores [methods, 3 circuits, L, H], eigenvalues [3, L, H,
// d_head, 2], kcomp_source [L, H, 2], detectors [3, L, H], methods,
// method_notes. View → kernel: method, qk_circuit, selected_layer/head.

import type { AnyModel, RenderProps } from "@anywidget/types";
import { decodeArray, type WireArray } from "../lib/arrays";
import { CATEGORICAL_LAYERS, LAYER_RAMP, layerPalette } from "../lib/colour";
import { colourBar } from "../lib/colourbar";
import { noExport } from "../lib/export";
import { el, listen } from "../lib/dom";
import { offsetControl } from "../lib/offset";
import { clearError, makePanel, runView, segmented, setTitle, showError } from "../lib/panel";
import { indexOr, perFrame, setTraits } from "../lib/selection";
import { fmt, headName } from "../lib/svg";
import { type EigenData, headToSelect, METHOD_LABELS, type PlacedHead, scoreAt, toEigenData } from "../lib/eigen";
import { drawScatter, showHoverLabel } from "./eigen/scatter";
import { headFinder, layerFilter } from "./eigen/controls";
import { drawSide } from "./eigen/side";
import "../styles/eigen.css";

export interface EigenTraits {
  [key: string]: unknown;
  model_name: string;
  methods: string[];
  method_notes: string[];
  scores: WireArray;
  eigenvalues: WireArray;
  kcomp_source: WireArray;
  detectors: WireArray;
  method: string;
  qk_circuit: string;
  selected_layer: number;
  selected_head: number;
}

type Model = AnyModel<EigenTraits>;

export function renderEigen({ model, el: root }: RenderProps<EigenTraits>): () => void {
  const doc = root.ownerDocument;
  const m = model as Model;
  const panel = makePanel(root, "eigen", "cw-eigen", () => headLabel());
  const cleanups: (() => void)[] = [];
  let data: EigenData | null = null;

  const methodControl = segmented(doc, "Score:", [], () => undefined);
  let methodCleanup = methodControl.cleanup;
  let methodUpdate = methodControl.update;
  const methodSlot = el(doc, "span");
  const qkControl = segmented(
    doc,
    "QK axis:",
    [
      { value: "qk", label: "token ↔ token", title: "full QK circuit W_E W_QK W_Eᵀ: does a token attend to itself?" },
      { value: "qk_kcomp", label: "via K-composition", title: "QK term through the earlier head with the strongest K-composition (induction heads)" },
    ],
    (value) => {
      setTraits(m, { qk_circuit: value });
      frame.schedule();
    },
  );
  const filter = layerFilter(doc, () => frame.schedule());
  const finder = headFinder(
    doc,
    () => ({ nLayers: data?.nLayers ?? 0, nHeads: data?.nHeads ?? 0 }),
    (layer, head) => {
      setTraits(m, { selected_layer: layer, selected_head: head });
      frame.schedule();
    },
  );
  panel.controls.append(methodSlot, qkControl.element, filter.element, finder.element);
  cleanups.push(offsetControl(doc, m as unknown as AnyModel<Record<string, unknown>>, panel.controls));
  cleanups.push(qkControl.cleanup, () => methodCleanup(), filter.cleanup, finder.cleanup);

  const plotBox = el(doc, "div", "cw-plot");
  const side = el(doc, "div", "cw-side");
  panel.body.append(plotBox, side);
  const note = el(doc, "div", "cw-note cw-method-note");
  const hint = noExport(el(doc, "span", undefined, " Click a head to select it; hover a dot for its name."));
  const legend = el(doc, "div", "cw-legend");
  plotBox.append(legend);
  panel.body.after(note);

  function methods(): string[] {
    const ms = m.get("methods");
    return Array.isArray(ms) ? ms.map(String) : [];
  }

  function methodIndex(): number {
    const i = methods().indexOf(String(m.get("method")));
    return i < 0 ? 0 : i;
  }

  function selection(d: EigenData): { layer: number; head: number } {
    return { layer: indexOr(m.get("selected_layer"), d.nLayers, 0), head: indexOr(m.get("selected_head"), d.nHeads, 0) };
  }

  function headLabel(): string {
    if (data === null) return "";
    const s = selection(data);
    return headName(s.layer, s.head);
  }

  function buildMethodControl(): void {
    methodCleanup();
    const c = segmented(
      doc,
      "Score:",
      methods().map((v) => ({ value: v, label: METHOD_LABELS[v] ?? v })),
      (value) => {
        setTraits(m, { method: value });
        frame.schedule();
      },
    );
    methodCleanup = c.cleanup;
    methodUpdate = c.update;
    methodSlot.replaceChildren(c.element);
  }

  function load(): void {
    try {
      data = toEigenData(
        decodeArray(m.get("scores")),
        decodeArray(m.get("eigenvalues")),
        decodeArray(m.get("kcomp_source")),
        decodeArray(m.get("detectors")),
      );
    } catch (err) {
      data = null;
      plotBox.replaceChildren();
      showError(panel, err);
      return;
    }
    clearError(panel);
    buildMethodControl();
    filter.setLayers(data.nLayers);
    drawLegend(data.nLayers);
  }

  /** A swatch per layer up to eight layers; beyond, the layer ramp as a colour bar numbered by layer. */
  function drawLegend(nLayers: number): void {
    if (nLayers > CATEGORICAL_LAYERS) {
      legend.replaceChildren(colourBar(doc, LAYER_RAMP, 0, nLayers - 1, "layer", 260, 0));
      return;
    }
    const colour = layerPalette(nLayers);
    legend.replaceChildren(
      ...Array.from({ length: nLayers }, (_, l) => {
        const item = el(doc, "span");
        const sw = el(doc, "span", "cw-swatch");
        sw.style.background = colour(l);
        item.append(sw, doc.createTextNode(`layer ${l}`));
        return item;
      }),
    );
  }

  function draw(): void {
    const d = data;
    if (d === null) return;
    const sel = selection(d);
    finder.update();
    const method = methods()[methodIndex()] ?? "eigen";
    methodUpdate(method);
    qkControl.update(String(m.get("qk_circuit")) === "qk" ? "qk" : "qk_kcomp");
    setTitle(panel, "Copying and matching of every head", String(m.get("model_name") ?? ""));
    const qkIndex = String(m.get("qk_circuit")) === "qk" ? 1 : 2;
    const scatter = drawScatter(doc, d, {
      methodIndex: methodIndex(),
      method,
      qk: qkIndex === 1 ? "qk" : "qk_kcomp",
      selected: sel,
      colour: layerPalette(d.nLayers),
      emphasis: filter.value(),
    });
    scatter.classList.add("cw-scatter");
    const old = plotBox.querySelector("svg.cw-scatter");
    if (old) old.replaceWith(scatter);
    else plotBox.prepend(scatter);
    side.replaceChildren(...drawSide(doc, d, sel, qkIndex));

    const notes = m.get("method_notes");
    note.textContent = `${METHOD_LABELS[method] ?? method}: ${Array.isArray(notes) ? String(notes[methodIndex()] ?? "") : ""}.`;
    note.append(hint);
    panel.status.textContent = `${headName(sel.layer, sel.head)} selected (OV ${fmt(scoreAt(d, methodIndex(), 0, sel.layer, sel.head))}, QK ${fmt(scoreAt(d, methodIndex(), qkIndex, sel.layer, sel.head))})`;
  }

  const frame = perFrame(draw);

  const hover = (event: Event) => showHoverLabel(plotBox.querySelector("svg.cw-scatter"), event.target as Element | null);

  cleanups.push(
    listen(plotBox, "mouseover", hover),
    listen(plotBox, "focusin", hover),
    listen(plotBox, "mouseleave", hover),
    listen(plotBox, "click", (event) => {
      const label = (event.target as Element | null)?.closest?.("[data-cw-label-head]")?.getAttribute("data-cw-label-head");
      if (label) {
        const [l, h] = label.split(".").map(Number);
        setTraits(m, { selected_layer: l as number, selected_head: h as number });
        frame.schedule();
        return;
      }
      const g = (event.target as Element | null)?.closest?.("[data-cw-head]");
      if (!g?.getAttribute("data-cw-head")) return;
      const placed = (e: Element): PlacedHead => ({
        id: e.getAttribute("data-cw-head") ?? "",
        x: Number(e.getAttribute("data-cw-x")),
        y: Number(e.getAttribute("data-cw-y")),
      });
      const points = Array.from(plotBox.querySelectorAll("[data-cw-head]"), placed);
      const current = `${m.get("selected_layer")}.${m.get("selected_head")}`;
      const value = headToSelect(points, placed(g), current);
      const [layer, head] = value.split(".").map(Number);
      setTraits(m, { selected_layer: layer as number, selected_head: head as number });
      frame.schedule();
    }),
    listen(plotBox, "keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      const g = (event.target as Element | null)?.closest?.("[data-cw-head]");
      if (g) {
        event.preventDefault();
        (g as unknown as { dispatchEvent(e: Event): boolean }).dispatchEvent(new MouseEvent("click", { bubbles: true }));
      }
    }),
  );

  return runView(m, panel, frame, cleanups, { data: ["scores", "eigenvalues", "kcomp_source", "detectors", "methods"], redraw: ["method", "qk_circuit", "selected_layer", "selected_head", "method_notes", "model_name"] }, load, draw);
}
