import { readFileSync } from "node:fs";
import { defineConfig } from "vitest/config";

export default defineConfig({
  // Stylesheets are imported as text, as esbuild bundles them (build.mjs).
  plugins: [
    {
      name: "css-as-text",
      enforce: "pre",
      load(id: string) {
        return id.endsWith(".css") ? `export default ${JSON.stringify(readFileSync(id, "utf8"))};` : null;
      },
    },
  ],
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node", // DOM tests opt in with a `@vitest-environment happy-dom` comment
  },
});
