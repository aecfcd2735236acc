/* Metro configuration of the fixture build (see README.md). Not a React Native app: there is
 * no react-native package, so this is the smallest config that bundles src/ the way a React
 * Native release build would:
 *   - @react-native/metro-babel-transformer + @react-native/babel-preset, the transformer of
 *     React Native apps (ES modules -> CommonJS, classes -> functions, ...); it also makes
 *     the function map (x_facebook_sources) from the original source;
 *   - metro-minify-terser, Metro's default minifier, with Metro's default terser options;
 *   - no polyfills (React Native's preset adds @react-native/js-polyfills; we have none): the
 *     bundle is Metro's prelude, its module system (metro-runtime's require.js), the
 *     @babel/runtime helpers the transform imports, and the app;
 *   - no cache and one worker, so that every run transforms everything again, the same way.
 */
const path = require('path');

module.exports = {
  projectRoot: __dirname,
  watchFolders: [],
  cacheStores: [],
  resetCache: true,
  maxWorkers: 1,
  resolver: {
    useWatchman: false,
    // what the file crawler need not look at
    blockList: [/\/(build|dist)\//],
  },
  transformer: {
    babelTransformerPath: require.resolve('@react-native/metro-babel-transformer'),
    minifierPath: require.resolve('metro-minify-terser'),
    getTransformOptions: async () => ({
      transform: {experimentalImportSupport: false, inlineRequires: false},
    }),
  },
  reporter: {update() {}},
};
