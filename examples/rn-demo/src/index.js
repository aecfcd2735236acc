/* DemoApp, a React-Native-like app: the entry module (Metro's entry file).
 *
 * Test-fixture source: dist/ and expected.md are generated from it and depend on
 * the lines and columns (1-based) of the marked lines. Do not move them:
 *   [js-frame 5] line 23, col 15 (`checkout`) / col 23 (`(`): App calls cart.checkout()
 *   [js-frame 7] line 27, col 13 (`runApplication`) / col 27 (`(`): the module's top
 *                level calls AppRegistry.runApplication()
 * The first column is where V8 puts a call (the callee's name; `new` for `new X()`),
 * the second where Hermes does (the `(` of the arguments). make-expected.js checks
 * these notes against the `[js-frame N]` markers and fails if they disagree.
 *
 * The crash: the second item has no price, so computeTotal() (pricing.js) throws
 * `new Error('price missing')` from the arrow function it passes to Array.prototype.map.
 */
import {Cart} from './cart';
import {AppRegistry} from './util';

function App(props) {
  const cart = new Cart(props.currency);
  cart.add({sku: 'TEA-1', price: 450, qty: 2});
  cart.add({sku: 'MUG-7', qty: 1}); // no price: checkout() throws
  // the call into cart.js
  return cart.checkout(); // [js-frame 5]
}

AppRegistry.registerComponent('DemoApp', () => App);
AppRegistry.runApplication('DemoApp', {currency: 'EUR'}); // [js-frame 7]
