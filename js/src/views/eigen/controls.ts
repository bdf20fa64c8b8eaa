// Controls that keep the scatter usable at a thousand heads: a layer filter
// (one layer in colour and named, the rest grey) and a box that finds a head
// by its name. Their state lives in the front end only.

import { el, listen } from "../../lib/dom";
import { exampleHeadName, parseHeadName } from "../../lib/eigen";

/** The layer filter: "all layers" or one layer; `onPick` gets null or the layer. */
export function layerFilter(doc: Document, onPick: (layer: number | null) => void): { element: HTMLLabelElement; setLayers(n: number): void; value(): number | null; cleanup(): void } {
  const select = el(doc, "select", "cw-layer-filter");
  select.setAttribute("aria-label", "Layer shown in colour");
  select.title = "Show one layer in colour and name its heads; the others stay grey";
  const label = el(doc, "label", undefined, "Layers ");
  label.append(select);
  const value = () => (select.value === "all" || select.value === "" ? null : Number(select.value));
  return {
    element: label,
    setLayers(n: number) {
      const keep = select.value;
      const all = el(doc, "option", undefined, "all");
      all.value = "all";
      const options = [all];
      for (let l = 0; l < n; l++) {
        const o = el(doc, "option", undefined, `layer ${l}`);
        o.value = String(l);
        options.push(o);
      }
      select.replaceChildren(...options);
      select.value = keep !== "" && keep !== "all" && Number(keep) < n ? keep : "all";
    },
    value,
    cleanup: listen(select, "change", () => onPick(value())),
  };
}

/**
 * A box that finds a head by name ("L3H7", "3.7"): Enter or "Find" hands the
 * head to `onFind`; a name that is not a head of this model is said beside it.
 */
export function headFinder(doc: Document, shape: () => { nLayers: number; nHeads: number }, onFind: (layer: number, head: number) => void): { element: HTMLSpanElement; update(): void; cleanup(): void } {
  const wrap = el(doc, "span", "cw-find");
  const input = el(doc, "input", "cw-find-input");
  input.type = "search";
  const example = () => {
    const { nLayers, nHeads } = shape();
    input.placeholder = exampleHeadName(nLayers, nHeads);
  };
  example();
  input.spellcheck = false;
  input.setAttribute("aria-label", "Find a head by name");
  const button = el(doc, "button", "cw-button", "Find");
  button.type = "button";
  const message = el(doc, "span", "cw-find-message");
  message.setAttribute("aria-live", "polite");
  wrap.append(doc.createTextNode("Head "), input, button, message);
  const find = () => {
    example();
    const { nLayers, nHeads } = shape();
    const q = parseHeadName(input.value, nLayers, nHeads);
    if ("error" in q) {
      message.textContent = input.value.trim() ? q.error : "";
      return;
    }
    message.textContent = "";
    onFind(q.layer, q.head);
  };
  const cleanups = [
    listen(input, "keydown", (event) => {
      if ((event as KeyboardEvent).key === "Enter") {
        event.preventDefault();
        find();
      }
    }),
    listen(button, "click", find),
  ];
  return { element: wrap, update: example, cleanup: () => cleanups.forEach((c) => c()) };
}
