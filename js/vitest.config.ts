import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node", // DOM tests opt in with a `@vitest-environment happy-dom` comment
  },
});
