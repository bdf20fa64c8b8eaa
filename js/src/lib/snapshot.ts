// The live layout of a rendered view redrawn as one SVG document.
//
// Backgrounds and borders become rects, canvases become embedded PNG images,
// inline SVG is copied, form controls draw their value, and every text node
// becomes an SVG <text> node holding the text as text (the serializer escapes
// it, so a token like "</svg>" stays text). Nothing here uses foreignObject,
// so a PNG rasterised from it is never tainted and the SVG opens in vector
// editors. What to leave out is the caller's to say (lib/export.ts leaves out
// the controls).

const SVG_NS = "http://www.w3.org/2000/svg";

interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

function isTransparent(colour: string): boolean {
  return colour === "" || colour === "transparent" || /^rgba\(.*,\s*0\)$/.test(colour);
}

function relative(r: DOMRect | Box, base: Box): Box {
  return { left: r.left - base.left, top: r.top - base.top, width: r.width, height: r.height };
}

function intersects(a: Box, b: Box): boolean {
  return a.left < b.left + b.width && b.left < a.left + a.width && a.top < b.top + b.height && b.top < a.top + a.height;
}

function num(v: number): string {
  return String(Math.round(v * 100) / 100);
}

/** Text attributes for an SVG <text> copying an element's computed font and colour. */
function textAttrs(style: CSSStyleDeclaration): Record<string, string> {
  return {
    "font-family": style.fontFamily || "sans-serif",
    "font-size": style.fontSize || "12px",
    "font-weight": style.fontWeight || "normal",
    "font-style": style.fontStyle || "normal",
    fill: style.color || "#000",
  };
}

/** Colour stops of a CSS `linear-gradient(...)` (left to right or top to bottom), or null. */
export function parseLinearGradient(css: string): { vertical: boolean; stops: { colour: string; offset: number }[] } | null {
  const m = /^linear-gradient\((.*)\)$/.exec(css.trim());
  if (!m) return null;
  const parts = (m[1] as string).split(/,(?![^(]*\))/).map((p) => p.trim());
  let vertical = false;
  if (parts[0] && /^(to |[\d.]+deg)/.test(parts[0])) {
    const dir = parts.shift() as string;
    vertical = dir === "to bottom" || dir === "180deg";
  }
  const stops = parts.map((p, i) => {
    const sm = /^(.*?)(?:\s+([\d.]+)%)?$/.exec(p);
    const offset = sm?.[2] !== undefined ? Number(sm[2]) / 100 : parts.length > 1 ? i / (parts.length - 1) : 0;
    return { colour: (sm?.[1] ?? p).trim(), offset };
  });
  return stops.length ? { vertical, stops } : null;
}

/**
 * The view under `root` as an SVG document (a string), leaving out every
 * element for which `skip` is true. Layout comes from the live page, so call
 * it on a rendered, visible view.
 */
export function snapshotLayout(root: HTMLElement, skip: (e: Element) => boolean = () => false): string {
  const doc = root.ownerDocument;
  const win = doc.defaultView;
  const rootBox = root.getBoundingClientRect();
  const base: Box = { left: rootBox.left, top: rootBox.top, width: rootBox.width, height: rootBox.height };
  const width = Math.max(1, Math.ceil(Math.max(base.width, root.scrollWidth)));
  const height = Math.max(1, Math.ceil(Math.max(base.height, root.scrollHeight)));
  const svg = doc.createElementNS(SVG_NS, "svg");
  svg.setAttribute("xmlns", SVG_NS);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const bg = doc.createElementNS(SVG_NS, "rect");
  for (const [k, v] of Object.entries({ x: "0", y: "0", width: String(width), height: String(height), fill: "#ffffff" })) bg.setAttribute(k, v);
  svg.append(bg);
  const defs = doc.createElementNS(SVG_NS, "defs");
  svg.append(defs);
  let gradients = 0;

  const style = (e: Element): CSSStyleDeclaration | null => (win ? win.getComputedStyle(e) : null);

  function addRect(box: Box, attrs: Record<string, string>): void {
    const r = doc.createElementNS(SVG_NS, "rect");
    r.setAttribute("x", num(box.left));
    r.setAttribute("y", num(box.top));
    r.setAttribute("width", num(box.width));
    r.setAttribute("height", num(box.height));
    for (const [k, v] of Object.entries(attrs)) r.setAttribute(k, v);
    svg.append(r);
  }

  /** Borders: one rect when all four sides match, else a line per side (dashed and dotted kept, as in legend samples). */
  function addBorders(box: Box, s: CSSStyleDeclaration): void {
    const sides = (["top", "right", "bottom", "left"] as const).map((side) => ({
      side,
      width: parseFloat(s.getPropertyValue(`border-${side}-width`)) || 0,
      style: s.getPropertyValue(`border-${side}-style`),
      colour: s.getPropertyValue(`border-${side}-color`),
    }));
    const shown = sides.filter((b) => b.width > 0 && b.style !== "none" && b.style !== "hidden" && b.style !== "" && !isTransparent(b.colour));
    if (shown.length === 0) return;
    const dash = (b: (typeof sides)[number]) => (b.style === "dashed" ? `${num(b.width * 3)} ${num(b.width * 2)}` : b.style === "dotted" ? `${num(b.width)} ${num(b.width)}` : null);
    const first = shown[0] as (typeof sides)[number];
    const same = shown.length === 4 && shown.every((b) => b.width === first.width && b.style === first.style && b.colour === first.colour);
    if (same && box.height > first.width * 2 && box.width > first.width * 2) {
      const attrs: Record<string, string> = { fill: "none", stroke: first.colour, "stroke-width": String(first.width), rx: String(parseFloat(s.borderTopLeftRadius) || 0) };
      const d = dash(first);
      if (d) attrs["stroke-dasharray"] = d;
      addRect({ left: box.left + first.width / 2, top: box.top + first.width / 2, width: box.width - first.width, height: box.height - first.width }, attrs);
      return;
    }
    for (const b of shown) {
      const h = b.width / 2;
      const right = box.left + box.width;
      const bottom = box.top + box.height;
      const [x1, y1, x2, y2] =
        b.side === "top"
          ? [box.left, box.top + h, right, box.top + h]
          : b.side === "bottom"
            ? [box.left, bottom - h, right, bottom - h]
            : b.side === "left"
              ? [box.left + h, box.top, box.left + h, bottom]
              : [right - h, box.top, right - h, bottom];
      const line = doc.createElementNS(SVG_NS, "line");
      const attrs: Record<string, string> = { x1: num(x1), y1: num(y1), x2: num(x2), y2: num(y2), stroke: b.colour, "stroke-width": String(b.width) };
      const d = dash(b);
      if (d) attrs["stroke-dasharray"] = d;
      for (const [k, v] of Object.entries(attrs)) line.setAttribute(k, v);
      svg.append(line);
    }
  }

  function addLine(text: string, first: Box, parentStyle: CSSStyleDeclaration | null, fit: boolean): void {
    const t = doc.createElementNS(SVG_NS, "text");
    t.setAttribute("x", num(first.left));
    t.setAttribute("y", num(first.top + first.height / 2));
    t.setAttribute("dominant-baseline", "central");
    t.setAttribute("xml:space", "preserve");
    if (fit) {
      t.setAttribute("textLength", num(first.width));
      t.setAttribute("lengthAdjust", "spacingAndGlyphs");
    }
    if (parentStyle) for (const [k, v] of Object.entries(textAttrs(parentStyle))) t.setAttribute(k, v);
    t.textContent = text;
    svg.append(t);
  }

  function addText(node: Text, parentStyle: CSSStyleDeclaration | null, clip: Box): void {
    const text = node.data;
    if (!text.trim()) return;
    const range = doc.createRange();
    range.selectNodeContents(node);
    const rects = [...range.getClientRects()].map((r) => relative(r, base)).filter((r) => r.width > 0);
    const first = rects[0];
    if (first === undefined) return;
    if (rects.length === 1) {
      if (intersects(first, clip)) addLine(text.replace(/\s*\n\s*/g, " "), first, parentStyle, true);
      return;
    }
    // wrapped text: one <text> per line, found from each word's position
    let line = "";
    let lineBox: Box | null = null;
    for (const match of text.matchAll(/\S+\s*/g)) {
      const start = match.index ?? 0;
      range.setStart(node, start);
      range.setEnd(node, start + match[0].length);
      const r = range.getClientRects()[0];
      if (r === undefined) continue;
      const box = relative(r, base);
      if (lineBox !== null && Math.abs(box.top - lineBox.top) > 2) {
        if (intersects(lineBox, clip)) addLine(line.trimEnd(), lineBox, parentStyle, false);
        line = "";
        lineBox = null;
      }
      if (lineBox === null) lineBox = { ...box };
      else lineBox.width = box.left + box.width - lineBox.left;
      line += match[0];
    }
    if (lineBox !== null && intersects(lineBox, clip)) addLine(line.trimEnd(), lineBox, parentStyle, false);
  }

  function addPlainText(text: string, x: number, y: number, s: CSSStyleDeclaration | null, fill?: string): void {
    const t = doc.createElementNS(SVG_NS, "text");
    t.setAttribute("x", num(x));
    t.setAttribute("y", num(y));
    t.setAttribute("dominant-baseline", "central");
    t.setAttribute("xml:space", "preserve");
    if (s) for (const [k, v] of Object.entries(textAttrs(s))) t.setAttribute(k, v);
    if (fill) t.setAttribute("fill", fill);
    t.textContent = text;
    svg.append(t);
  }

  /** Form controls draw their value, not their children. */
  function addControl(node: HTMLSelectElement | HTMLInputElement, box: Box, s: CSSStyleDeclaration | null): void {
    if (box.width <= 0 || box.height <= 0) return;
    const midY = box.top + box.height / 2;
    if (node instanceof HTMLInputElement && (node.type === "checkbox" || node.type === "radio")) {
      const size = Math.min(box.width, box.height, 13);
      const x = box.left + (box.width - size) / 2;
      const y = midY - size / 2;
      addRect({ left: x, top: y, width: size, height: size }, { fill: node.checked ? "#0072B2" : "#fff", stroke: node.checked ? "#0072B2" : "#767676", rx: node.type === "radio" ? String(size / 2) : "2" });
      if (node.checked) {
        const p = doc.createElementNS(SVG_NS, "path");
        p.setAttribute("d", `M${num(x + size * 0.22)},${num(y + size * 0.52)} L${num(x + size * 0.42)},${num(y + size * 0.72)} L${num(x + size * 0.78)},${num(y + size * 0.3)}`);
        p.setAttribute("fill", "none");
        p.setAttribute("stroke", "#fff");
        p.setAttribute("stroke-width", "1.8");
        svg.append(p);
      }
      return;
    }
    addRect(box, { fill: "#fff", stroke: "#999", rx: "2" });
    if (node instanceof HTMLSelectElement) {
      const text = node.selectedOptions[0]?.text ?? "";
      addPlainText(text, box.left + 5, midY, s);
      const a = box.left + box.width - 12;
      const p = doc.createElementNS(SVG_NS, "path");
      p.setAttribute("d", `M${num(a)},${num(midY - 2)} L${num(a + 4)},${num(midY + 2)} L${num(a + 8)},${num(midY - 2)}`);
      p.setAttribute("fill", "none");
      p.setAttribute("stroke", "#555");
      svg.append(p);
      return;
    }
    if (node.value) addPlainText(node.value, box.left + 5, midY, s);
    else if (node.placeholder) addPlainText(node.placeholder, box.left + 5, midY, s, "#999");
  }

  function visit(node: Element, clip: Box): void {
    if (skip(node)) return;
    const s = style(node);
    if (s && (s.display === "none" || s.visibility === "hidden")) return;
    const box = relative(node.getBoundingClientRect(), base);
    if (node !== root && box.width > 0 && box.height > 0 && !intersects(box, clip)) return;
    if (s && node instanceof HTMLElement) {
      if (!isTransparent(s.backgroundColor)) addRect(box, { fill: s.backgroundColor, rx: String(parseFloat(s.borderTopLeftRadius) || 0) });
      const gradient = s.backgroundImage && s.backgroundImage !== "none" ? parseLinearGradient(s.backgroundImage) : null;
      if (gradient && box.width > 0 && box.height > 0) {
        const id = `cw-gradient-${gradients++}`;
        const g = doc.createElementNS(SVG_NS, "linearGradient");
        g.setAttribute("id", id);
        g.setAttribute("x1", "0");
        g.setAttribute("y1", "0");
        g.setAttribute("x2", gradient.vertical ? "0" : "1");
        g.setAttribute("y2", gradient.vertical ? "1" : "0");
        for (const stop of gradient.stops) {
          const st = doc.createElementNS(SVG_NS, "stop");
          st.setAttribute("offset", String(stop.offset));
          st.setAttribute("stop-color", stop.colour);
          g.append(st);
        }
        defs.append(g);
        addRect(box, { fill: `url(#${id})` });
      }
      addBorders(box, s);
    }
    if (node instanceof HTMLCanvasElement) {
      if (box.width > 0 && box.height > 0) {
        const img = doc.createElementNS(SVG_NS, "image");
        img.setAttribute("x", num(box.left));
        img.setAttribute("y", num(box.top));
        img.setAttribute("width", num(box.width));
        img.setAttribute("height", num(box.height));
        img.setAttribute("preserveAspectRatio", "none");
        img.setAttribute("style", "image-rendering: pixelated");
        try {
          img.setAttribute("href", node.toDataURL("image/png"));
        } catch {
          return;
        }
        svg.append(img);
      }
      return;
    }
    if (node instanceof HTMLSelectElement || node instanceof HTMLInputElement) {
      addControl(node, box, s);
      return;
    }
    if (node instanceof SVGSVGElement) {
      const copy = node.cloneNode(true) as SVGSVGElement;
      copy.setAttribute("x", num(box.left));
      copy.setAttribute("y", num(box.top));
      copy.setAttribute("width", num(box.width));
      copy.setAttribute("height", num(box.height));
      if (!copy.hasAttribute("viewBox")) copy.setAttribute("viewBox", `0 0 ${num(box.width)} ${num(box.height)}`);
      svg.append(copy);
      return;
    }
    const inner = s && s.overflow !== "visible" && node !== root ? box : clip;
    for (const child of node.childNodes) {
      if (child.nodeType === 3) addText(child as Text, s, inner);
      else if (child instanceof Element) visit(child, inner);
    }
  }

  visit(root, { left: 0, top: 0, width, height });
  const serializer = new (win?.XMLSerializer ?? XMLSerializer)();
  return `<?xml version="1.0" encoding="UTF-8"?>\n${serializer.serializeToString(svg)}`;
}
