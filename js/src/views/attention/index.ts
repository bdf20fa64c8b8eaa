// AttentionPatterns view: a layers × heads grid of thumbnails, one large
// pattern on canvas (Ctrl/⌘ + wheel to zoom, drag to pan, double-click to
// reset), beside it a strip of the selected head's direct logit effect
// (signed) or of the model's loss per position (./strip.ts), and the tokens as text.
//
// Kernel → view: tokens, patterns / value_patterns (uint8 binary buffers, see
// lib/patterns.ts; while the kernel streams, `[L, H, 0]` placeholders whose
// heads arrive as custom messages), value_norms, logit_effect, diagonals; for
// long contexts (tile_block > 0) an overview per head and tiles on request
// (./long.ts, lib/tiles.ts); for a batch, `prompts` and arrays padded per
// prompt (./data.ts). View ↔ kernel: selected_layer / selected_head,
// selected_prompt, selected_dest, selected_src, pattern_kind, strip, show_diagonals.
// Hover is front-end only. The pieces: ./layout.ts (geometry), ./source.ts,
// ./data.ts and ./long.ts (data), ./thumbs.ts, ./prompts.ts (prompt picker),
// ./canvas.ts (main canvas), ./tokens.ts (token strip), ./words.ts (legend,
// status), ./interaction.ts (events), ./visible.ts (painting what is on screen).

import type { AnyModel, RenderProps } from "@anywidget/types";
import { type ColourScale, followSelection, scaleWeights } from "../../lib/attentionui";
import { listen } from "../../lib/dom";
import { cellImage, sizeCanvas } from "../../lib/heatmap";
import { makePanel, setTitle } from "../../lib/panel";
import { indexOr, NONE, onTraits, perFrame, setTraits } from "../../lib/selection";
import { ATTENTION } from "../../lib/shading";
import { headName } from "../../lib/svg";
import { clampView, fullView, isFull, type Viewport } from "../../lib/viewport";
import { drawScene } from "./canvas";
import { makeControls, makeElements, type TokenMode, updateStripControls } from "./controls";
import { bindEvents } from "./interaction";
import { type AttentionTraits, type Data, loadData, subtitleWords } from "./data";
import { LongSource } from "./long";
import { EMPTY_RGBA, HOVER, type Hover, type Layout, mainLayout, SELECT, type Sel } from "./layout";
import { PromptPicker } from "./prompts";
import { fillStreamedHeads, type PatternSource } from "./source";
import { chooseStrip, type Strip, stripShades } from "./strip";
import { Thumbs } from "./thumbs";
import { TokenStrip } from "./tokens";
import { topSources } from "./topsources";
import { type Kind, legendItems, statusText, type Subject, tokenHint, hoverText as wordsHover, zoomWords } from "./words";
import "../../styles/attention.css";

export type { AttentionTraits, Diagonal } from "./data";

export function renderAttention({ model, el: root }: RenderProps<AttentionTraits>): () => void {
  const doc = root.ownerDocument;
  const panel = makePanel(root, "attention", "cw-attention", () => {
    const s = sel();
    return s ? headName(s.layer, s.head) : "";
  });
  // the stylesheet's selection and hover colours are the canvas's (one definition, in ./layout.ts)
  panel.root.style.setProperty("--cw-select", SELECT);
  panel.root.style.setProperty("--cw-hover", HOVER);
  const offline = model.get("__offline__" as never) === true;

  // ---- structure
  const controls = makeControls(doc, {
    kind: (v) => setTraits(model, { pattern_kind: v }),
    strip: (v) => setTraits(model, { strip: v }),
    tokens: (v) => {
      tokenMode = v;
      frame.schedule();
    },
    hover: (v) => {
      hoverMode = v;
      hover = { dest: NONE, src: NONE };
      frame.schedule();
    },
    scale: (v) => {
      colourScale = v;
      version++;
      thumbs.queueAll(selectedIndex());
      frame.schedule();
    },
  });
  const { kindControl, stripControl, tokenControl, hoverControl, scaleControl, diagBox, resetButton, zoomText } = controls;
  panel.controls.append(...controls.elements);

  const picker = new PromptPicker(doc, {
    choose(p) {
      // positions past the chosen prompt's end are cleared in the same update (the kernel checks them against it)
      const n = (model.get("prompts") ?? [])[p]?.length ?? 0;
      const clear = (v: unknown) => (typeof v === "number" && v < n ? v : NONE);
      setTraits(model, { selected_prompt: p, selected_dest: clear(model.get("selected_dest")), selected_src: clear(model.get("selected_src")) });
    },
    source: (p) => (kind() === "value" ? data?.batch?.source(p, "value") : data?.batch?.source(p, "raw")) ?? null,
    head: () => sel() ?? { layer: 0, head: 0 },
    scale: () => colourScale,
  });
  panel.root.insertBefore(picker.element, panel.body);
  const { thumbBox, main, caption, canvas, legend, hoverLine, tokensHead, tokenBox, side } = makeElements(doc, panel);
  const sources = topSources(doc);
  side.append(sources.element);

  // ---- state
  let data: Data | null = null;
  let view: Viewport = fullView(0);
  let hover: Hover = { dest: NONE, src: NONE };
  let hoverMode: "dest" | "src" = "dest";
  let tokenMode: TokenMode = "attention";
  let colourScale: ColourScale = "linear";
  let mainImage: HTMLCanvasElement | null = null;
  let mainKey = "";
  let version = 0;
  let requested = false;
  let shownTokens: string[] | null = null;
  const strip = new TokenStrip(doc, tokenBox);
  const thumbs = new Thumbs(doc, thumbBox, () => shown(), () => colourScale);

  function sel(): Sel | null {
    if (data === null) return null;
    const p = data.raw;
    return {
      layer: indexOr(model.get("selected_layer"), p.nLayers, 0),
      head: indexOr(model.get("selected_head"), p.nHeads, 0),
      dest: indexOr(model.get("selected_dest"), p.nTokens, NONE, true),
      src: indexOr(model.get("selected_src"), p.nTokens, NONE, true),
    };
  }

  function selectedIndex(): number {
    const s = sel();
    return s && data ? s.layer * data.raw.nHeads + s.head : 0;
  }

  function kind(): Kind {
    return model.get("pattern_kind") === "value" && data?.value ? "value" : "raw";
  }

  function shown(): PatternSource | null {
    if (data === null) return null;
    return kind() === "value" && data.value ? data.value : data.raw;
  }

  /** What the strip beside the pattern shows for the selected head (the `strip` trait's choice, when sent). */
  function stripOf(s: Sel, d: Data): Strip | null {
    return chooseStrip(model.get("strip"), d.effect, d.loss, s, d.raw.nHeads, d.raw.nTokens);
  }

  function subject(d: Data, p: PatternSource, s: Sel): Subject {
    const { tokens, raw, value, norms, effect, loss, long } = d;
    return { tokens, shown: p, raw, value, norms, effect, loss, strip: stripOf(s, d), long, kind: kind(), scale: colourScale };
  }

  // ---- data
  function showError(message: string): void {
    data = null;
    thumbBox.replaceChildren();
    tokenBox.replaceChildren();
    caption.textContent = "";
    legend.replaceChildren();
    panel.status.textContent = message;
    panel.status.classList.add("cw-error");
  }

  function loadArrays(): void {
    const wasLong = data?.long != null;
    try {
      data = loadData(model, offline, data);
    } catch (err) {
      showError(err instanceof Error ? err.message : String(err));
      return;
    }
    panel.status.classList.remove("cw-error");
    version++;
    const n = data.tokens.length;
    if (data.tokens !== shownTokens) {
      shownTokens = data.tokens;
      strip.load(data.tokens);
    }
    if (view.size !== n) view = fullView(n);
    // long texts: weights are small; each row scaled by its max shows where every row attends most
    if (data.long !== null && !wasLong) colourScale = "row";
    setTitle(panel, "Attention patterns", subtitleWords(data, model.get("windows")));
    thumbs.build(data.raw, selectedIndex());
    picker.load(data.batch?.prompts ?? [], data.batch?.index ?? 0);
    const streaming = data.raw.readyCount() < data.raw.nLayers * data.raw.nHeads;
    if (streaming && !requested && !offline) {
      requested = true;
      model.send({ type: "want_heads" });
    }
    if (!streaming) requested = false;
  }

  function onCustom(content: unknown, buffers: unknown): void {
    if (data === null) return;
    const type = (content as { type?: unknown } | null)?.type;
    let filled: number[] = [];
    let main = true;
    if (data.dense !== null) filled = fillStreamedHeads(data.dense.raw, data.dense.value, content, buffers);
    else if (data.long !== null && type === "overview") {
      const before = data.long.readyCount();
      filled = data.long.receiveOverview(content, buffers);
      // bands of other heads arrive several times a second at long contexts: only their thumbnails
      // change, and the status line's count when one completes
      main = filled.includes(selectedIndex()) || data.long.readyCount() !== before;
    } else if (data.long !== null && (type === "tile" || type === "tile_error")) {
      data.long.store.receive(content, Array.isArray(buffers) ? buffers : []);
    } else return;
    for (const i of filled) thumbs.queueOne(i, true);
    if (!main) return;
    version++;
    frame.schedule();
  }

  // ---- main canvas
  function layout(): Layout {
    return mainLayout(data?.raw.nTokens ?? 0, data?.effect != null || data?.loss != null, panel.body.clientWidth);
  }

  function drawMain(s: Sel, p: PatternSource, d: Data): void {
    const L = layout();
    // its widest (the column may narrow, drawing the canvas smaller, to stay beside the thumbnails: attention.css)
    if (main.style.maxWidth !== `${L.width}px`) main.style.maxWidth = `${L.width}px`;
    const dpr = globalThis.devicePixelRatio || 1;
    const ready = p.ready(s.layer, s.head);
    if (ready && p instanceof LongSource) p.need(s.layer, s.head, view, L.size * dpr); // ask first: tiles are computed while this frame draws
    const ctx = sizeCanvas(canvas, L.width, L.height);
    if (ctx === null) return;
    if (ready) {
      const key = `${kind()}|${s.layer}|${s.head}|${view.r0},${view.c0},${view.size}|${L.size * dpr}|${version}|${colourScale}`;
      if (key !== mainKey || mainImage === null) {
        mainImage = cellImage(doc, p.cells(s.layer, s.head, view, L.size * dpr, colourScale), ATTENTION, EMPTY_RGBA, mainImage ?? undefined);
        mainKey = key;
      }
    }
    const diagonals = model.get("show_diagonals") ? (model.get("diagonals") ?? []) : [];
    drawScene(doc, ctx, {
      layout: L,
      view,
      sel: s,
      hover,
      tokens: d.tokens,
      image: ready ? mainImage : null,
      message: `Loading layer ${s.layer}, head ${s.head}…`,
      strip: stripOf(s, d),
      diagonals,
    });
  }

  // ---- tokens
  function shadeTokens(s: Sel, p: PatternSource, d: Data): void {
    strip.follow(view, hover.dest !== NONE ? hover.dest : s.dest);
    const { start, end } = strip;
    const shown = stripOf(s, d);
    if (tokenMode === "strip" && shown !== null) {
      const { values, limit, lut } = stripShades(shown, start, end);
      strip.shade(values, limit, lut);
      return;
    }
    let values: Float32Array | null = null;
    if (hover.dest !== NONE) values = p.row(s.layer, s.head, hover.dest, start, end);
    else if (hover.src !== NONE) values = p.column(s.layer, s.head, hover.src, start, end);
    else if (s.dest !== NONE) values = p.row(s.layer, s.head, s.dest, start, end);
    else if (s.src !== NONE) values = p.column(s.layer, s.head, s.src, start, end);
    strip.shade(values === null ? null : scaleWeights(values, colourScale));
  }

  // ---- one frame
  /** Write text only when it changed (a rewrite invalidates layout even when equal). */
  function setText(node: HTMLElement, text: string): void {
    if (node.textContent !== text) node.textContent = text;
  }

  let chromeKey = "";
  /** Controls, caption, legend: only when something they show changed, not on every hover. */
  function drawChrome(s: Sel, p: PatternSource, d: Data): void {
    const key = [s.layer, s.head, kind(), model.get("strip"), tokenMode, hoverMode, colourScale, view.r0, view.c0, view.size, model.get("show_diagonals"), version].join("|");
    if (key === chromeKey) return;
    chromeKey = key;
    thumbs.select(s.layer * p.nHeads + s.head);
    if (d.batch !== null) picker.redraw();
    kindControl.update(kind());
    const shownStrip = stripOf(s, d);
    updateStripControls(controls, shownStrip, { effect: d.effect !== null, loss: d.loss !== null }, tokenMode);
    hoverControl.update(hoverMode);
    scaleControl.update(colourScale);
    const valueButton = kindControl.element.querySelector<HTMLButtonElement>('button[data-value="value"]');
    if (valueButton) valueButton.disabled = d.value === null;
    diagBox.checked = Boolean(model.get("show_diagonals"));
    resetButton.disabled = isFull(view, p.nTokens);
    setText(zoomText, zoomWords(view, p.nTokens, p instanceof LongSource ? p : null, layout().size * (globalThis.devicePixelRatio || 1)));
    setText(caption, `${headName(s.layer, s.head)}: rows are destinations (queries), columns sources (keys)`);
    canvas.setAttribute("aria-label", `Attention pattern of layer ${s.layer}, head ${s.head}`);
    legend.replaceChildren(...legendItems(doc, s, subject(d, p, s), model.get("show_diagonals") ? (model.get("diagonals") ?? []) : null));
    setText(tokensHead, tokenHint(tokenMode === "strip" && shownStrip !== null ? shownStrip.kind : hoverMode));
  }

  function draw(): void {
    const started = performance.now();
    const d = data;
    const p = shown();
    const s = sel();
    if (d === null || p === null || s === null) return;
    drawChrome(s, p, d);
    drawMain(s, p, d);
    shadeTokens(s, p, d);
    strip.mark(s, hover);
    sources.update(s, hover.dest !== NONE ? hover.dest : s.dest, p, d.tokens, d.long !== null);
    const words = subject(d, p, s);
    setText(hoverLine, wordsHover(s, hover, words));
    setText(panel.status, (d.batch ? `Prompt ${d.batch.index + 1} of ${d.batch.prompts.length} · ` : "") + statusText(s, words));
    root.dataset.cwDrawMs = (performance.now() - started).toFixed(2);
    // when the selected head was first drawn, and first drawn whole (tests and benchmarks read these)
    if (root.dataset.cwPainted === undefined && p.ready(s.layer, s.head)) root.dataset.cwPainted = performance.now().toFixed(1);
    if (root.dataset.cwPaintedWhole === undefined && p.complete(s.layer, s.head)) root.dataset.cwPaintedWhole = performance.now().toFixed(1);
    if (d.long !== null) {
      root.dataset.cwTilesPending = String(d.long.store.pending);
      root.dataset.cwTilesCached = String(d.long.store.size);
    }
  }

  const frame = perFrame(draw);

  function setView(next: Viewport): void {
    const v = clampView(next, data?.raw.nTokens ?? 0);
    if (v.r0 !== view.r0 || v.c0 !== view.c0 || v.size !== view.size) {
      view = v;
      frame.schedule();
    }
  }

  const cleanups: (() => void)[] = [
    kindControl.cleanup,
    stripControl.cleanup,
    scaleControl.cleanup,
    tokenControl.cleanup,
    hoverControl.cleanup,
    listen(diagBox, "change", () => setTraits(model, { show_diagonals: diagBox.checked })),
    listen(resetButton, "click", () => setView(fullView(data?.raw.nTokens ?? 0))),
    ...bindEvents({
      model: model as unknown as AnyModel<Record<string, unknown>>,
      canvas,
      tokenBox,
      thumbs: thumbBox,
      n: () => data?.raw.nTokens ?? 0,
      sel,
      layout,
      view: () => view,
      setView,
      hover: () => hover,
      setHover: (h) => {
        hover = h;
      },
      hoverMode: () => hoverMode,
      scrollToToken: (i) => strip.scrollTo(i),
      redraw: frame.schedule,
    }),
    onTraits(
      model,
      ["tokens", "prompts", "selected_prompt", "patterns", "value_patterns", "causal", "value_norms", "logit_effect", "per_token_loss", "overview", "top_sources", "tile_block"],
      () => {
        loadArrays();
        frame.schedule();
      },
    ),
    onTraits(model, ["pattern_kind"], () => {
      version++;
      thumbs.queueAll(selectedIndex());
      frame.schedule();
    }),
    onTraits(model, ["diagonals"], () => {
      version++;
      frame.schedule();
    }),
    onTraits(model, ["selected_layer", "selected_head", "selected_dest", "selected_src", "show_diagonals", "strip"], frame.schedule),
    onTraits(model, ["selected_dest"], () => {
      const d = model.get("selected_dest");
      if (typeof d === "number" && d >= 0) {
        strip.follow(view, d);
        strip.scrollTo(d);
      }
    }),
    onTraits(model, ["selected_dest", "selected_src"], () => {
      // a zoomed view follows a selection made elsewhere (tokens, Python, a linked view)
      const s = sel();
      if (data !== null && s !== null) setView(followSelection(view, data.raw.nTokens, s.dest, s.src));
    }),
  ];
  // fit the container: redraw when its width changes (a narrow notebook, the explorer's grid)
  const Resize = doc.defaultView?.ResizeObserver;
  if (Resize !== undefined) {
    let width = panel.body.clientWidth;
    const observer = new Resize(() => {
      if (panel.body.clientWidth !== width) {
        width = panel.body.clientWidth;
        frame.schedule();
      }
    });
    observer.observe(panel.body);
    cleanups.push(() => observer.disconnect());
  }
  const customHandler = (content: unknown, buffers: unknown) => onCustom(content, buffers);
  model.on("msg:custom", customHandler);
  cleanups.push(() => model.off("msg:custom", customHandler));

  loadArrays();
  draw();

  return () => {
    frame.cancel();
    thumbs.cancel();
    picker.cleanup();
    for (const cleanup of cleanups) cleanup();
    tokensHead.remove();
    tokenBox.remove();
    panel.cleanup();
  };
}
