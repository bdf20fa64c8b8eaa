// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { clearError, makePanel, runView, showError } from "../src/lib/panel";
import { perFrame } from "../src/lib/selection";
import { FakeModel } from "./fake-model";
import { nextFrame } from "./weightspace-fixtures";

describe("a view's life (lib/panel runView)", () => {
  it("reads on data changes, redraws once per frame, and cleans up every listener", async () => {
    const m = new FakeModel<Record<string, unknown>>({ scores: 1, selected_head: 0 });
    const root = document.createElement("div");
    const panel = makePanel(root, "toy", "cw-toy");
    const calls: string[] = [];
    const draw = () => calls.push("draw");
    const frame = perFrame(draw);
    const cleanup = runView(m.asModel(), panel, frame, [], { data: ["scores"], redraw: ["selected_head"] }, () => calls.push("load"), draw);
    expect(calls).toEqual(["load", "draw"]);
    m.fromKernel({ scores: 2 });
    m.fromKernel({ selected_head: 1 });
    await nextFrame();
    expect(calls).toEqual(["load", "draw", "load", "draw"]); // one frame for both changes
    cleanup();
    expect(m.listenerCount()).toBe(0);
    expect(root.dataset.cwView).toBeUndefined();
  });

  it("shows a data error as text in the status line, and clears it", () => {
    const panel = makePanel(document.createElement("div"), "toy", "cw-toy");
    showError(panel, new Error("scores of shape [2] are not <b>[3]</b>"));
    expect(panel.status.textContent).toBe("scores of shape [2] are not <b>[3]</b>");
    expect(panel.status.querySelector("b")).toBeNull();
    expect(panel.status.classList.contains("cw-error")).toBe(true);
    clearError(panel);
    expect(panel.status.classList.contains("cw-error")).toBe(false);
  });
});
