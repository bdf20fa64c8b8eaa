// Stylesheets are bundled as text (js/build.mjs: loader ".css": "text") and
// added to the page by lib/dom.ts ensureStyle, so exported pages and hosts
// that render in a shadow root (marimo) get them the same way.
declare module "*.css" {
  const text: string;
  export default text;
}
