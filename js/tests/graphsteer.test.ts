// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { highlightInPlace, nodeCaption, parseResults, steerPanel } from "../src/views/graph/read";

const HOSTILE = "<img src=x onerror=alert(1)>\u202e label";

describe("the graph view's labels and interventions", () => {
  it("shows a user's label as text, escaped, in the editor, the table and under the node", () => {
    const results = parseResults([{ key: "0|zero|", rows: [0], mode: "zero", value: 0, predicted: -0.2, measured: 0.1 }, { bad: 1 }]);
    expect(results.length).toBe(1);
    const calls: [string, number][] = [];
    const box = steerPanel(document, { rows: [0], name: HOSTILE, live: true, results, labels: ["L0 f1 @2"], clerps: [HOSTILE], request: (m, v) => calls.push([m, v]), rename: () => undefined });
    expect(box.querySelectorAll("img").length).toBe(0);
    expect(box.textContent).toContain("<img src=x");
    expect(box.textContent).not.toContain("\u202e");
    expect(box.querySelectorAll("[data-cw-result]").length).toBe(1);
    (box.querySelector('[data-cw-intervene="times2"]') as HTMLButtonElement).click();
    expect(calls).toEqual([["times2", 0]]);
    const caption = nodeCaption(document, "feature", { x: 10, y: 10, r: 7 }, HOSTILE, "L0 f1 @2", 3, true);
    expect(caption?.textContent?.startsWith("<img")).toBe(true);
    expect(caption?.children.length).toBe(0);
  });

  it("disables the buttons without a kernel and shows the logit's probability", () => {
    const box = steerPanel(document, { rows: [0], name: "x", live: false, results: [], labels: ["a"], clerps: ["a"], request: () => undefined, rename: () => undefined });
    expect((box.querySelector('[data-cw-intervene="zero"]') as HTMLButtonElement).disabled).toBe(true);
    const logit = nodeCaption(document, "logit", { x: 10, y: 30, r: 7 }, "", "logit ' the' (262)", 0.52, true);
    expect(logit?.textContent).toContain("p=0.52");
  });

  it("highlights a selection in place: the node's edges stay, the rest dims", () => {
    const plot = document.createElement("div");
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    for (const [e] of [[0], [1], [2]]) {
      const p = document.createElementNS(ns, "path");
      p.setAttribute("class", "cw-edge");
      p.setAttribute("data-cw-edge", String(e));
      svg.append(p);
    }
    for (const i of [0, 1, 2, 3]) {
      const g = document.createElementNS(ns, "g");
      g.setAttribute("class", "cw-node");
      g.setAttribute("data-cw-node", String(i));
      g.append(document.createElementNS(ns, "circle"));
      svg.append(g);
    }
    plot.append(svg);
    // edges 0→1, 1→2, 2→3; select node 1
    highlightInPlace(plot, 1, [0, 1, 2], [1, 2, 3], new Set(), 4, "#E69F00");
    expect(plot.querySelectorAll(".cw-edge[data-cw-dim]").length).toBe(1);
    expect(plot.querySelectorAll(".cw-node[data-cw-dim]").length).toBe(1);
    expect(plot.querySelector("[data-cw-selected]")?.getAttribute("data-cw-node")).toBe("1");
    highlightInPlace(plot, -1, [0, 1, 2], [1, 2, 3], new Set(), -1, "#E69F00");
    expect(plot.querySelectorAll("[data-cw-dim]").length).toBe(0);
  });
});
