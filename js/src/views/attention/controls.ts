// The attention view's controls (pattern kind, colour scale, what the strip
// beside the pattern shows, what the tokens show, how a hovered token is read,
// offset diagonals, reset zoom) and the elements around them: thumbnails, main
// canvas, legend, token strip.

import { COLOUR_SCALES, type ColourScale } from "../../lib/attentionui";
import { el } from "../../lib/dom";
import { noExport } from "../../lib/export";
import { type Panel, segmented } from "../../lib/panel";
import type { Strip } from "./strip";

/** What the tokens show: attention (of the hovered or selected token), or the strip's values. */
export type TokenMode = "attention" | "strip";

export interface ControlHandlers {
  kind(value: string): void;
  strip(value: Strip["kind"]): void;
  tokens(mode: TokenMode): void;
  hover(mode: "dest" | "src"): void;
  scale(scale: ColourScale): void;
}

export type Segmented = ReturnType<typeof segmented>;

export interface Controls {
  kindControl: Segmented;
  stripControl: Segmented;
  tokenControl: Segmented;
  hoverControl: Segmented;
  scaleControl: Segmented;
  diagBox: HTMLInputElement;
  resetButton: HTMLButtonElement;
  zoomText: HTMLElement;
  /** In the order they appear. */
  elements: HTMLElement[];
}

/** Build the controls; each calls its handler when the user changes it. */
export function makeControls(doc: Document, on: ControlHandlers): Controls {
  const kindControl = segmented(
    doc,
    "Pattern",
    [
      { value: "raw", label: "Raw", title: "Attention weights A[dest, src]" },
      { value: "value", label: "Value-weighted", title: "A[dest, src] · ‖v_src W_O‖, each row normalised to sum to 1" },
    ],
    on.kind,
  );
  const stripControl = segmented(
    doc,
    "Strip",
    [
      { value: "logit_effect", label: "Logit effect", title: "Beside the pattern: this head's direct effect on the logit of the next token" },
      { value: "loss", label: "Loss", title: "Beside the pattern: the model's loss (nats) predicting the next token, per position (the same for every head)" },
    ],
    (v) => on.strip(v === "loss" ? "loss" : "logit_effect"),
  );
  const tokenControl = segmented(
    doc,
    "Tokens show",
    [
      { value: "attention", label: "Attention", title: "Shade tokens by the hovered or selected token's attention" },
      { value: "strip", label: "Logit effect", title: "Shade each token by what the strip beside the pattern shows" },
    ],
    (v) => on.tokens(v === "strip" ? "strip" : "attention"),
  );
  const hoverControl = segmented(
    doc,
    "Hover token as",
    [
      { value: "dest", label: "Destination", title: "Hovering a token shows where it attends (its row)" },
      { value: "src", label: "Source", title: "Hovering a token shows which tokens attend to it (its column)" },
    ],
    (v) => on.hover(v === "src" ? "src" : "dest"),
  );
  const scaleControl = segmented(doc, "Colour", COLOUR_SCALES, (v) => on.scale(v === "row" || v === "gamma" ? v : "linear"));
  const diagLabel = el(doc, "label");
  const diagBox = el(doc, "input");
  diagBox.type = "checkbox";
  diagBox.dataset.cwControl = "diagonals";
  diagLabel.append(diagBox, doc.createTextNode("Offset diagonals"));
  const resetButton = el(doc, "button", "cw-button cw-small", "Reset zoom");
  resetButton.type = "button";
  resetButton.title = "Show the whole pattern (or double-click it)";
  const zoomText = el(doc, "span", "cw-zoom");
  return {
    kindControl,
    stripControl,
    tokenControl,
    hoverControl,
    scaleControl,
    diagBox,
    resetButton,
    zoomText,
    elements: [kindControl.element, scaleControl.element, stripControl.element, tokenControl.element, hoverControl.element, diagLabel, resetButton, zoomText],
  };
}

export interface Elements {
  thumbBox: HTMLDivElement;
  main: HTMLDivElement;
  caption: HTMLDivElement;
  canvas: HTMLCanvasElement;
  legend: HTMLDivElement;
  hoverLine: HTMLDivElement;
  tokensHead: HTMLDivElement;
  tokenBox: HTMLDivElement;
  /** The column of the thumbnails and the token strip (beside the pattern when it fits). */
  side: HTMLDivElement;
}

/** The thumbnails and the main column in the panel's body; the token strip after it, before the status line. */
export function makeElements(doc: Document, panel: Panel): Elements {
  const thumbBox = el(doc, "div", "cw-thumbs");
  const main = el(doc, "div", "cw-main");
  const caption = el(doc, "div", "cw-caption");
  const canvas = el(doc, "canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  const legend = el(doc, "div", "cw-legend");
  const hoverLine = noExport(el(doc, "div", "cw-hover"));
  main.append(caption, canvas, legend, hoverLine);
  const tokensHead = noExport(el(doc, "div", "cw-tokens-head"));
  const tokenBox = el(doc, "div", "cw-tokens");
  // the token strip sits under the thumbnails, in the column beside the pattern that was blank below them
  const side = el(doc, "div", "cw-side");
  side.append(thumbBox, tokensHead, tokenBox);
  panel.body.append(side, main);
  return { thumbBox, main, caption, canvas, legend, hoverLine, tokensHead, tokenBox, side };
}

/** The strip's and the tokens' controls for what the strip shows: the choice pressed, what was not sent disabled,
 * the tokens' second button named after the strip's values. */
export function updateStripControls(c: Controls, strip: Strip | null, sent: { effect: boolean; loss: boolean }, tokens: TokenMode): void {
  c.stripControl.update(strip?.kind ?? "");
  const button = (control: Segmented, value: string) => control.element.querySelector<HTMLButtonElement>(`button[data-value="${value}"]`);
  const effectButton = button(c.stripControl, "logit_effect");
  if (effectButton) effectButton.disabled = !sent.effect;
  const lossButton = button(c.stripControl, "loss");
  if (lossButton) lossButton.disabled = !sent.loss;
  c.tokenControl.update(tokens === "strip" && strip !== null ? "strip" : "attention");
  const tokenButton = button(c.tokenControl, "strip");
  if (tokenButton) {
    tokenButton.disabled = strip === null;
    tokenButton.textContent = strip?.kind === "loss" ? "Loss" : "Logit effect";
  }
}
