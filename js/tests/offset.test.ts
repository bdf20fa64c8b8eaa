// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import { offsetControl, offsetLabel, offsetOptions } from "../src/lib/offset";
import { FakeModel } from "./fake-model";

describe("rotary offset control", () => {
  it("names the offsets a reader knows", () => {
    expect(offsetLabel(0)).toBe("Δ = 0 (same position)");
    expect(offsetLabel(1)).toBe("Δ = 1 (previous token)");
    expect(offsetLabel(7)).toBe("Δ = 7");
    expect(offsetOptions(7)).toEqual([0, 1, 2, 4, 7, 8, 16]);
    expect(offsetOptions(1)).toEqual([0, 1, 2, 4, 8, 16]);
  });

  it("is hidden for models without rotary layers", () => {
    const m = new FakeModel({ qk_offset: -1 });
    const host = document.createElement("div");
    offsetControl(document, m.asModel(), host);
    expect((host.querySelector("[data-cw-offset]") as HTMLElement).style.display).toBe("none");
  });

  it("shows the current offset, sends a choice to the kernel and follows the kernel", () => {
    const m = new FakeModel({ qk_offset: 0 });
    const host = document.createElement("div");
    const cleanup = offsetControl(document, m.asModel(), host);
    const select = host.querySelector("select") as HTMLSelectElement;
    expect(select.disabled).toBe(false);
    expect(select.value).toBe("0");
    select.value = "1";
    select.dispatchEvent(new Event("change"));
    expect(m.saves).toEqual([{ qk_offset: 1 }]);
    m.fromKernel({ qk_offset: 5 });
    expect(select.value).toBe("5");
    cleanup();
    expect(host.querySelector("select")).toBeNull();
  });

  it("is disabled in an exported page, and says the page holds one offset", () => {
    const m = new FakeModel({ qk_offset: 1, __offline__: true });
    const host = document.createElement("div");
    offsetControl(document, m.asModel(), host);
    const label = host.querySelector("[data-cw-offset]") as HTMLElement;
    expect((host.querySelector("select") as HTMLSelectElement).disabled).toBe(true);
    expect(label.title).toContain("Δ = 1 (previous token)");
    expect(label.title).toContain("live kernel");
  });
});
