#!/usr/bin/env node
/* Runs dist/index.bundle in node (V8), the way a JS engine runs a React Native bundle: the
 * whole file as one script, named `index.bundle`. The app crashes while the bundle loads
 * (index.js calls AppRegistry.runApplication at module level); this catches the error and
 * writes:
 *
 *   OUT_DIR/stack-v8.txt   error.stack, the text V8 made (real)
 *   OUT_DIR/stack-jsc.txt  the same frames in JavaScriptCore's `fn@file:line:col` form, as
 *                          JSC's error.stack has them (no message line); derived from the
 *                          V8 frames, there is no JSC here
 *
 *   node run.js BUNDLE OUT_DIR
 *
 * The stack holds the frames of the bundle only: below the bundle's global code, V8 would
 * add the frames of node's vm module and of this script (machine-specific paths, node
 * versions). So the bundle runs twice, each time in a fresh vm context: first with no frame
 * limit, to count the frames down to the bundle's global code, then with that count as the
 * context's Error.stackTraceLimit. The second error.stack is written as V8 made it.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const FILE = 'index.bundle'; // the script name the frames show

function crash(code, limit) {
  const context = vm.createContext({});
  vm.runInContext(`Error.stackTraceLimit = ${limit};`, context);
  const script = new vm.Script(code, {filename: FILE});
  try {
    script.runInContext(context, {displayErrors: false});
  } catch (e) {
    return e;
  }
  throw new Error(`${FILE} ran without throwing`);
}

// "    at NAME (FILE:L:C)", "    at FILE:L:C", "    at NAME (<anonymous>)" (native)
const FRAME = /^    at (?:(.+?) \((.+)\)|(.+))$/;

function parseFrame(line) {
  const m = FRAME.exec(line);
  if (!m) throw new Error(`not a V8 frame: ${line}`);
  const fn = m[1] ?? null;
  const where = m[2] ?? m[3];
  const loc = /^(.*):(\d+):(\d+)$/.exec(where);
  return loc
    ? {fn, file: loc[1], line: +loc[2], column: +loc[3]}
    : {fn, file: where, line: null, column: null};
}

function main() {
  const [bundle, outDir] = process.argv.slice(2);
  if (!outDir) {
    console.error('usage: node run.js BUNDLE OUT_DIR');
    process.exit(2);
  }
  const code = fs.readFileSync(bundle, 'utf8');

  // 1: how many frames down to the bundle's global code (the last frame in FILE)?
  const lines = crash(code, Infinity).stack.split('\n');
  const first = lines.findIndex((l) => l.startsWith('    at '));
  const frames = lines.slice(first);
  let count = 0;
  frames.forEach((l, i) => {
    if (parseFrame(l).file === FILE) count = i + 1;
  });
  if (count === 0) throw new Error('no frame in ' + FILE);

  // 2: the stack with just those frames
  const err = crash(code, count);
  const stack = err.stack;
  const v8Frames = stack.split('\n').slice(first).map(parseFrame);
  if (v8Frames.length !== count || v8Frames[count - 1].file !== FILE) {
    throw new Error('unexpected second stack:\n' + stack);
  }
  fs.writeFileSync(path.join(outDir, 'stack-v8.txt'), stack + '\n');

  // JSC: "fn@file:line:col", one frame a line; JSC's error.stack has no message line.
  // JSC names a function by its own name, without V8's receiver type ("Object.", "Cart.",
  // "new "): the last dotted part of V8's name. An anonymous function is "@file:line:col",
  // the script's global code (the last frame here) "global code@...", a native function
  // "fn@[native code]". Lines and columns are V8's.
  const jsc = [];
  for (const [i, f] of v8Frames.entries()) {
    let fn = f.fn ?? (i === v8Frames.length - 1 ? 'global code' : '');
    fn = fn.replace(/^new /, '').replace(/^async /, '');
    fn = fn.slice(fn.lastIndexOf('.') + 1);
    jsc.push(f.line == null ? `${fn}@[native code]` : `${fn}@${f.file}:${f.line}:${f.column}`);
  }
  fs.writeFileSync(path.join(outDir, 'stack-jsc.txt'), jsc.join('\n') + '\n');
  process.stdout.write(stack + '\n');
}

main();
