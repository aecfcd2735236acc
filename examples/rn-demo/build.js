#!/usr/bin/env node
/* Runs Metro (programmatic API, metro.config.js) on src/index.js.
 *
 *   node build.js OUT_BUNDLE OUT_MAP PLATFORM MINIFY(true|false) SOURCE_MAP_URL
 *
 * A release build (dev false), as `react-native bundle --dev false` makes it: the bundle ends
 * with `//# sourceMappingURL=SOURCE_MAP_URL`. Paths are relative to this directory.
 */
'use strict';
const path = require('path');
const Metro = require('metro');

async function main() {
  const [bundleOut, sourceMapOut, platform, minify, sourceMapUrl] = process.argv.slice(2);
  if (!sourceMapUrl || !['true', 'false'].includes(minify)) {
    console.error('usage: node build.js OUT_BUNDLE OUT_MAP PLATFORM true|false SOURCE_MAP_URL');
    process.exit(2);
  }
  const here = __dirname;
  const config = await Metro.loadConfig({config: path.join(here, 'metro.config.js')});
  await Metro.runBuild(config, {
    entry: 'src/index.js',
    platform,
    dev: false,
    minify: minify === 'true',
    sourceMap: true,
    sourceMapUrl,
    bundleOut: path.resolve(here, bundleOut),
    sourceMapOut: path.resolve(here, sourceMapOut),
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
