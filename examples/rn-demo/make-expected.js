#!/usr/bin/env node
/* Writes expected.md: for each stack in dist/, the frame-by-frame ground truth, and checks
 * it against metro-symbolicate (its command line and its JS API).
 *
 *   node make-expected.js SOURCE_ROOT
 *
 * SOURCE_ROOT is the directory the maps name the sources under (build.js).
 *
 * The ground truth comes from the source, not from the maps: the app's frames are the
 * `[js-frame N]` markers of src/, whose line and columns are noted in each file's header
 * comment (checked here against the marked lines); the frames of Metro's module system are
 * found in metro-runtime's require.js by the call they make. Two columns per call site,
 * because the engines report a call at different places:
 *   V8 (and the JSC stack, derived from V8's): the callee's name (`map` in `list.map(x)`),
 *                                             `new` for `new Error(...)`;
 *   Hermes:                                   the `(` of the arguments.
 * The function names are those of Metro's function map (x_facebook_sources), which names
 * a function from the source: `Cart#checkout` (class method), `list.map$argument_0` (a
 * function passed to list.map), `AppRegistry.runApplication` (object method), `<global>`
 * (a module's top level). They are listed here, and metro-symbolicate must agree.
 *
 * Exits non-zero, naming the frame, on any disagreement.
 */
'use strict';
const {execFileSync} = require('child_process');
const fs = require('fs');
const path = require('path');

const HERE = __dirname;
const SRC = path.join(HERE, 'src');
const REQUIRE_JS = 'node_modules/metro-runtime/src/polyfills/require.js';
const SYMBOLICATE_BIN = path.join(HERE, 'node_modules/.bin/metro-symbolicate');
// metro-symbolicate's own module (src/Symbolication.js, exported as private/*) and the
// source-map package it uses
const Symbolication = require('metro-symbolicate/private/Symbolication');
const {SourceMapConsumer} = require(
  require.resolve('source-map', {
    paths: [path.dirname(require.resolve('metro-symbolicate/package.json'))],
  }),
);

function die(msg) {
  console.error(`make-expected.js: error: ${msg}`);
  process.exit(1);
}

// --- the ground truth ----------------------------------------------------------------------
// The frames of the crash, innermost first; the index is the frame's index in every stack.
const FRAMES = [
  {kind: 'app', file: 'src/pricing.js', fn: 'list.map$argument_0', what: 'throw site'},
  {kind: 'native', fn: 'Array.prototype.map'},
  {kind: 'app', file: 'src/pricing.js', fn: 'lineTotals', what: 'calls list.map'},
  {kind: 'app', file: 'src/pricing.js', fn: 'computeTotal', what: 'calls lineTotals'},
  {kind: 'app', file: 'src/cart.js', fn: 'Cart#checkout', what: 'calls computeTotal'},
  {kind: 'app', file: 'src/index.js', fn: 'App', what: 'calls cart.checkout'},
  {kind: 'app', file: 'src/util.js', fn: 'AppRegistry.runApplication', what: 'calls the component'},
  {kind: 'app', file: 'src/index.js', fn: '<global>', what: 'module top level: calls runApplication'},
  {kind: 'lib', file: REQUIRE_JS, fn: 'loadModuleImplementation', call: /^\s*(factory)\($/,
    what: 'calls the module factory'},
  {kind: 'lib', file: REQUIRE_JS, fn: 'guardedLoadModule', call: /^\s*return (loadModuleImplementation)\(/,
    what: 'calls loadModuleImplementation'},
  {kind: 'lib', file: REQUIRE_JS, fn: 'metroRequire', call: /^\s*: (guardedLoadModule)\(/,
    what: 'calls guardedLoadModule'},
  {kind: 'unmapped', what: "the bundle's global code: `__r(0)`, which Metro maps to no source"},
];

// The notes in the header comments of src/: "[js-frame N] line L, col C (`tok`) / col P (`(`)".
const NOTE = /\[js-frame (\d+)\] line (\d+), col (\d+) \(`([^`]+)`\) \/ col (\d+) \(`\(`\)/g;

function appSites() {
  const sites = new Map();
  for (const name of fs.readdirSync(SRC).sort()) {
    const text = fs.readFileSync(path.join(SRC, name), 'utf8');
    const lines = text.split('\n');
    const file = `src/${name}`;
    const markers = new Map();
    lines.forEach((l, i) => {
      const m = /\/\/ \[js-frame (\d+)\]$/.exec(l);
      if (m) markers.set(+m[1], i + 1);
    });
    for (const m of text.matchAll(NOTE)) {
      const [, n, line, col, token, paren] = m.map((x, i) => (i === 4 ? x : +x));
      const l = lines[line - 1] ?? '';
      if (markers.get(n) !== line) {
        die(`${file}: the note says [js-frame ${n}] is on line ${line}, the marker is on line ${markers.get(n)}`);
      }
      if (l.slice(col - 1, col - 1 + token.length) !== token) {
        die(`${file}:${line}: no \`${token}\` at column ${col}`);
      }
      if (l[paren - 1] !== '(' || l.indexOf('(', col - 1 + token.length) !== paren - 1) {
        die(`${file}:${line}: column ${paren} is not the first \`(\` after \`${token}\``);
      }
      sites.set(n, {file, line, v8: col, hermes: paren, text: l.trim()});
      markers.delete(n);
    }
    for (const n of markers.keys()) die(`${file}: [js-frame ${n}] has no note in the header`);
  }
  return sites;
}

function libSite(frame) {
  const lines = fs.readFileSync(path.join(HERE, frame.file), 'utf8').split('\n');
  const hits = [];
  lines.forEach((l, i) => {
    const m = frame.call.exec(l);
    if (m) {
      const col = l.indexOf(m[1]) + 1;
      hits.push({file: frame.file, line: i + 1, v8: col, hermes: col + m[1].length, text: l.trim()});
    }
  });
  if (hits.length !== 1) die(`${frame.file}: ${hits.length} lines match ${frame.call}`);
  return hits[0];
}

function groundTruth() {
  const sites = appSites();
  const truth = FRAMES.map((f, index) => {
    let site = null;
    if (f.kind === 'app') {
      site = sites.get(index);
      if (!site) die(`no [js-frame ${index}] marker in src/`);
      if (site.file !== f.file) die(`[js-frame ${index}] is in ${site.file}, not ${f.file}`);
      sites.delete(index);
    } else if (f.kind === 'lib') {
      site = libSite(f);
    }
    return {...f, index, site};
  });
  for (const n of sites.keys()) die(`[js-frame ${n}] in src/ is not a frame of FRAMES`);
  return truth;
}

// --- the stacks ------------------------------------------------------------------------------
const STACKS = [
  {
    file: 'dist/stack-v8.txt',
    map: 'dist/index.bundle.map',
    engine: 'V8 (node), real',
    columns: 'v8',
    columnStart: 1, // V8's columns are 1-based
    messageLines: 1, // "Error: price missing"
  },
  {
    file: 'dist/stack-jsc.txt',
    map: 'dist/index.bundle.map',
    engine: "JavaScriptCore's form, derived from the V8 frames (run.js); frames only, as in JSC's error.stack",
    columns: 'v8',
    columnStart: 1,
    messageLines: 0,
  },
  {
    file: 'dist/stack-hermes.txt',
    map: 'dist/index.android.bundle.hbc.map',
    engine: 'Hermes (hermes VM on the bytecode), real',
    columns: 'hermes',
    columnStart: 0, // Hermes prints the bytecode's virtual offset, which starts at 0
    messageLines: 1,
  },
];

// One frame of any of the three forms: its text as in the stack, its position (or none).
function parseStack(text, messageLines) {
  const lines = text.replace(/\n$/, '').split('\n');
  return lines.slice(messageLines).map((raw) => {
    const m = /([^\s(@]+):(\d+):(\d+)\)?$/.exec(raw);
    return m
      ? {raw, file: m[1], line: +m[2], column: +m[3]}
      : {raw, file: null, line: null, column: null};
  });
}

function symbolicateCli(map, stackFile, columnStart) {
  const args = [map];
  if (columnStart !== 0) args.push('--input-column-start', String(columnStart));
  const out = execFileSync(SYMBOLICATE_BIN, args, {
    cwd: HERE,
    input: fs.readFileSync(path.join(HERE, stackFile)),
    encoding: 'utf8',
  });
  return {args, out};
}

function main() {
  const sourceRoot = process.argv[2];
  if (!sourceRoot) die('usage: node make-expected.js SOURCE_ROOT');
  const truth = groundTruth();
  const md = [];
  md.push(
    '# rn-demo: expected symbolication',
    '',
    'Generated by `make-expected.js` (run by `generate.sh`); do not edit. The ground truth is',
    "taken from the source (the `[js-frame N]` markers of `src/` and the notes in each file's",
    "header; for Metro's module system, the calls in metro-runtime's `require.js`), then checked",
    'against `metro-symbolicate` (command line: file, line, function; JS API: the column too).',
    '',
    'Lines and columns are 1-based. Files are named as the maps name them. A call site has two',
    "columns in the source: V8 reports a call at the callee's name (`map` in `list.map(...)`,",
    '`new` for `new Error(...)`), Hermes at the `(` of the arguments; each table uses its',
    "engine's. Functions are named as Metro's function map (`x_facebook_sources`) names them.",
    '',
    '| frame | what | file | line | V8 col | Hermes col | source line |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  );
  for (const t of truth) {
    const s = t.site;
    md.push(
      s
        ? `| ${t.index} | ${t.fn}: ${t.what} | ${s.file} | ${s.line} | ${s.v8} | ${s.hermes} | \`${s.text}\` |`
        : `| ${t.index} | ${t.kind === 'native' ? `${t.fn} (native code)` : t.what} | - | - | - | - | - |`,
    );
  }

  for (const st of STACKS) {
    const mapText = fs.readFileSync(path.join(HERE, st.map), 'utf8');
    const context = Symbolication.createContext(SourceMapConsumer, mapText, {
      inputColumnStart: st.columnStart,
    });
    const frames = parseStack(fs.readFileSync(path.join(HERE, st.file), 'utf8'), st.messageLines);
    if (frames.length !== truth.length) {
      die(`${st.file}: ${frames.length} frames, expected ${truth.length}`);
    }
    const cli = symbolicateCli(st.map, st.file, st.columnStart);
    const cliLines = cli.out.replace(/\n$/, '').split('\n').slice(st.messageLines);

    md.push(
      '',
      `## ${st.file}`,
      '',
      `${st.engine}. Map: \`${st.map}\`. Stack columns are ${st.columnStart}-based.`,
      '',
      '| frame | in the stack | expected file | line | column | function |',
      '| --- | --- | --- | --- | --- | --- |',
    );
    const problems = [];
    frames.forEach((f, i) => {
      const t = truth[i];
      const where = `${st.file} frame ${i} (${f.raw.trim()})`;
      const shown = '`' + f.raw.trim().replace(/^at /, '') + '`';
      if (t.kind === 'native') {
        if (f.line != null) problems.push(`${where}: expected a native frame`);
        md.push(`| ${i} | ${shown} | (native: no position) | | | |`);
        return;
      }
      if (f.line == null) {
        problems.push(`${where}: no position`);
        return;
      }
      const api = context.getOriginalPositionFor(f.line, f.column);
      const cliLine = cliLines[i] ?? '';
      if (t.kind === 'unmapped') {
        if (api.source != null) problems.push(`${where}: maps to ${api.source}:${api.line}, expected nothing`);
        if (!cliLine.includes('null:null:null')) problems.push(`${where}: metro-symbolicate says ${cliLine.trim()}`);
        md.push(`| ${i} | ${shown} | (no mapping: ${t.what}) | | | |`);
        return;
      }
      const file = `${sourceRoot}/${t.site.file}`;
      const line = t.site.line;
      const column = t.site[st.columns];
      const got = `${api.source}:${api.line}:${api.column + 1} ${api.name}`;
      if (got !== `${file}:${line}:${column} ${t.fn}`) {
        problems.push(`${where}: metro-symbolicate (JS API) says ${got}, the source ${file}:${line}:${column} ${t.fn}`);
      }
      if (!cliLine.includes(`${file}:${line}:${t.fn}`)) {
        problems.push(`${where}: metro-symbolicate says ${cliLine.trim()}, the source ${file}:${line}:${t.fn}`);
      }
      md.push(`| ${i} | ${shown} | ${file} | ${line} | ${column} | ${t.fn} |`);
    });
    if (problems.length) die(problems.join('\n'));

    // reading V8's 1-based columns as 0-based (metro-symbolicate's default): same answers?
    let note = '';
    if (st.columnStart !== 0) {
      const zero = Symbolication.createContext(SourceMapConsumer, mapText, {});
      const show = (p) =>
        `${path.basename(p.source ?? 'null')}:${p.line}:${p.column == null ? null : p.column + 1}`;
      const differ = [];
      let onlyColumns = true;
      frames.forEach((f, i) => {
        if (f.line == null) return;
        const a = context.getOriginalPositionFor(f.line, f.column);
        const b = zero.getOriginalPositionFor(f.line, f.column);
        if (show(a) === show(b) && a.name === b.name) return;
        if (a.source !== b.source || a.line !== b.line || a.name !== b.name) onlyColumns = false;
        differ.push(`frame ${i}: ${show(b)} ${b.name} instead of ${show(a)} ${a.name}`);
      });
      const without =
        `Without \`--input-column-start ${st.columnStart}\` (the columns read as 0-based, one ` +
        'too far right) metro-symbolicate gives ';
      note =
        differ.length === 0
          ? without + 'the same answers for this stack, columns included.'
          : without +
            (onlyColumns
              ? 'the same files, lines and functions, but not the same columns'
              : 'other answers') +
            ` (JS API, 1-based): ${differ.join('; ')}.`;
    }
    md.push(
      '',
      'Checked, every frame agreeing, with metro-symbolicate (and its JS API, ' +
        '`getOriginalPositionFor`, for the columns), run in `examples/rn-demo`:',
      '',
      '```',
      `npx metro-symbolicate ${cli.args.join(' ')} < ${st.file}`,
      '```',
      '',
      '```',
      cli.out.replace(/\n$/, ''),
      '```',
    );
    if (note) md.push('', note);
  }
  fs.writeFileSync(path.join(HERE, 'expected.md'), md.join('\n') + '\n');
  console.log('expected.md: every frame of the three stacks agrees with metro-symbolicate');
}

main();
