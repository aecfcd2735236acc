#!/usr/bin/env node
/* Composes the Metro (packager) source map with the one hermesc wrote for the bytecode, as
 * React Native's release build does (react-native/scripts/compose-source-maps.js): with
 * metro-source-map's composeSourceMaps. The result maps bytecode virtual offsets (line 1,
 * column = offset) to the original sources, and keeps Metro's x_facebook_sources (function
 * map) and hermesc's x_hermes_function_offsets.
 *
 *   node compose-maps.js PACKAGER_MAP COMPILER_MAP OUT_MAP
 */
'use strict';
const fs = require('fs');
const {composeSourceMaps} = require('metro-source-map');

const [packagerPath, compilerPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node compose-maps.js PACKAGER_MAP COMPILER_MAP OUT_MAP');
  process.exit(2);
}
const read = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));
const packager = read(packagerPath);
const compiler = read(compilerPath);
for (const [what, map] of [['packager', packager], ['compiler', compiler]]) {
  if (map.x_facebook_offsets != null || map.x_facebook_segments != null) {
    throw new Error(`${what} map: RAM bundles / segments are not supported`);
  }
}
fs.writeFileSync(outPath, JSON.stringify(composeSourceMaps([packager, compiler])));
