// Bundles every view into ONE ES module, ../circuitwidgets/static/index.js, and
// the offline model of exported pages into ../circuitwidgets/static/shim.js.
// One bundle is deliberate: an exported HTML page holding many widgets needs a
// single copy of the code. `define.amd = false` keeps the module loadable
// where require.js is present (classic notebook, some HTML exports).
// Stylesheets (src/styles/*.css) are bundled as text: views add them to the
// page themselves (lib/dom.ts ensureStyle), in notebooks and exported pages alike.
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
  loader: { ".css": "text" },
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
