// Mounts the widgets of an exported page (see offline.ts). The page holds, per
// widget, `<div class="cw-widget" [data-cw-link="name …" [data-cw-link-group="id"] [data-cw-link-as="name=own …"]]>`
// (widgets of one group, or of the page when no group is named, are linked) with its state in
// `script.cw-state` and an empty `.cw-view`; the bundle is base64 text in
// `#cw-bundle`, imported once from a blob URL (the page's CSP allows nothing else).

import { b64bytes, LinkGroup, OfflineModel, parseAliases, revive } from "./offline";

interface Widget {
  initialize?: (props: { model: OfflineModel }) => unknown;
  render: (props: { model: OfflineModel; el: HTMLElement }) => unknown;
}

declare global {
  interface Window {
    __circuitwidgetsBundle?: Promise<{ default: Widget }>;
    __circuitwidgetsMount?: () => Promise<unknown>;
  }
}

async function bundle(): Promise<Widget> {
  if (!window.__circuitwidgetsBundle) {
    const source = document.getElementById("cw-bundle");
    const code = new TextDecoder().decode(b64bytes((source?.textContent ?? "").trim()));
    const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
    window.__circuitwidgetsBundle = import(/* @vite-ignore */ url) as Promise<{ default: Widget }>;
  }
  return (await window.__circuitwidgetsBundle).default;
}

/** The page's link groups, by their `data-cw-link-group` and `data-cw-link` values. */
const groups = new Map<string, LinkGroup>();

async function mount(node: HTMLElement): Promise<void> {
  if (node.dataset.cwMounted) return;
  node.dataset.cwMounted = "1";
  const stateNode = node.querySelector("script.cw-state");
  const state = (await revive(JSON.parse(stateNode?.textContent ?? "{}"))) as Record<string, unknown>;
  const widget = await bundle();
  const model = new OfflineModel(state);
  const link = node.dataset.cwLink;
  if (link) {
    // (a named group's members may link different names: a map with no head axis links positions only)
    const names = link.split(/\s+/).filter(Boolean);
    const key = node.dataset.cwLinkGroup ? `g|${node.dataset.cwLinkGroup}` : `|${link}`;
    let group = groups.get(key);
    if (group === undefined) groups.set(key, (group = new LinkGroup(names)));
    group.add(model, names, parseAliases(node.dataset.cwLinkAs));
  }
  const el = node.querySelector<HTMLElement>(".cw-view");
  if (el === null) return;
  if (widget.initialize) await widget.initialize({ model });
  await widget.render({ model, el });
}

window.__circuitwidgetsMount = () => Promise.all(Array.from(document.querySelectorAll<HTMLElement>(".cw-widget"), mount));
