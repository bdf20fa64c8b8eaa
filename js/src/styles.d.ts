// Views import their stylesheet for its side effect: esbuild bundles every
// imported .css file into static/index.css (the widgets' `_css`).
declare module "*.css";
