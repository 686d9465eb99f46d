// Bundle the widget into the Python package: src/widget.ts -> ../src/trainmeter/static/widget.js
// (one ESM file, uPlot included, no runtime imports) and src/widget.css -> static/widget.css.

import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const outdir = fileURLToPath(new URL("../src/trainmeter/static/", import.meta.url));
const watch = process.argv.includes("--watch");

const options = {
  entryPoints: ["src/widget.ts", "src/widget.css"],
  outdir,
  bundle: true,
  format: "esm",
  minify: !watch,
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  platform: "browser",
  legalComments: "none",
  logLevel: "info",
};

if (watch) {
  const { context } = await import("esbuild");
  const ctx = await context(options);
  await ctx.watch();
} else {
  await build(options);
}
