// Bundles every view into ONE ES module, ../circuitwidgets/static/index.js, its
// stylesheets (src/styles/*.css, imported by the views) into static/index.css,
// and the offline model of exported pages into static/shim.js.
// One bundle is deliberate: an exported HTML page holding many widgets needs a
// single copy of the code. `define.amd = false` keeps the module loadable
// where require.js is present (classic notebook, some HTML exports).
// The widgets' `_esm` and `_css` are the paths of index.js and index.css, so
// anywidget reloads both in open views while `--watch` rebuilds (ANYWIDGET_HMR=1).
//
//   node build.mjs          one minified build
//   node build.mjs --watch  rebuild on change (pair with ANYWIDGET_HMR=1)
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const watch = process.argv.includes("--watch");

/** @type {import("esbuild").BuildOptions} */
const common = {
  absWorkingDir: here,
  bundle: true,
  target: "es2022",
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  legalComments: "none",
  logLevel: "info",
};

/** @type {import("esbuild").BuildOptions[]} */
const builds = [
  { ...common, entryPoints: ["src/index.ts"], outfile: "../circuitwidgets/static/index.js", format: "esm", define: { "define.amd": "false" } },
  // inlined into exported pages by circuitwidgets/export.py (a classic script, not a module)
  { ...common, entryPoints: ["src/shim/main.ts"], outfile: "../circuitwidgets/static/shim.js", format: "iife", sourcemap: false },
];

if (watch) {
  for (const options of builds) await (await esbuild.context(options)).watch();
} else {
  await Promise.all(builds.map((options) => esbuild.build(options)));
}
