// Bundles every view into ONE ES module, ../circuitwidgets/static/index.js.
// One bundle is deliberate: an exported HTML page holding many widgets needs a
// single copy of the code. `define.amd = false` keeps the module loadable
// where require.js is present (classic notebook, some HTML exports).
//
//   node build.mjs          one minified build
//   node build.mjs --watch  rebuild on change (pair with ANYWIDGET_HMR=1)
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const watch = process.argv.includes("--watch");

/** @type {import("esbuild").BuildOptions} */
const options = {
  absWorkingDir: here,
  entryPoints: ["src/index.ts"],
  outfile: "../circuitwidgets/static/index.js",
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  define: { "define.amd": "false" },
  legalComments: "none",
  logLevel: "info",
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
