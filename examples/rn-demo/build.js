#!/usr/bin/env node
/* Runs Metro (programmatic API, metro.config.js) on src/index.js: a release build (dev
 * false), as `react-native bundle --dev false` makes it.
 *
 *   node build.js OUT_BUNDLE OUT_MAP PLATFORM MINIFY(true|false) SOURCE_MAP_URL SOURCE_ROOT
 *
 * The bundle ends with `//# sourceMappingURL=SOURCE_MAP_URL`. Metro names the sources in
 * the map by absolute path; so that the map does not depend on where this checkout is, the
 * directory of this script is then replaced by SOURCE_ROOT in the map's `sources` (the
 * only change made to Metro's output). Output paths are relative to this directory.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const Metro = require('metro');

async function main() {
  const args = process.argv.slice(2);
  const [bundleOut, sourceMapOut, platform, minify, sourceMapUrl, sourceRoot] = args;
  if (args.length !== 6 || !['true', 'false'].includes(minify)) {
    console.error(
      'usage: node build.js OUT_BUNDLE OUT_MAP PLATFORM true|false SOURCE_MAP_URL SOURCE_ROOT',
    );
    process.exit(2);
  }
  const here = __dirname;
  const config = await Metro.loadConfig({config: path.join(here, 'metro.config.js')});
  const mapPath = path.resolve(here, sourceMapOut);
  await Metro.runBuild(config, {
    entry: 'src/index.js',
    platform,
    dev: false,
    minify: minify === 'true',
    sourceMap: true,
    sourceMapUrl,
    bundleOut: path.resolve(here, bundleOut),
    sourceMapOut: mapPath,
  });

  const text = fs.readFileSync(mapPath, 'utf8');
  const map = JSON.parse(text);
  if (JSON.stringify(map) !== text) {
    throw new Error(`${sourceMapOut}: not in JSON.stringify form; would be rewritten`);
  }
  const prefix = here + path.sep;
  map.sources = map.sources.map((s) =>
    s.startsWith(prefix) ? sourceRoot + '/' + s.slice(prefix.length).split(path.sep).join('/') : s,
  );
  const out = JSON.stringify(map);
  if (out.includes(here)) {
    throw new Error(`${sourceMapOut}: still names ${here}`);
  }
  fs.writeFileSync(mapPath, out);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
