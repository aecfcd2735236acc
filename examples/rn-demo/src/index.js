/* DemoApp, a React-Native-like app: the entry module (Metro's entry file).
 *
 * Test-fixture source: dist/ and expected.md are generated from it and depend
 * on the line/column (1-based) of the marked lines. Do not move them:
 *   line 20 col 15  App:       `cart.checkout()`   [js-frame 5] call (col 10 = `cart`)
 *   line 24 col 13  <global>:  `AppRegistry.runApplication(...)`  [js-frame 7]
 *                              call (col 1 = `AppRegistry`)
 * make_expected.js checks the `[js-frame N]` markers and fails if they moved.
 * The crash: the second item has no price, so computeTotal() (pricing.js)
 * throws `new Error('price missing')` from a callback of Array.prototype.map.
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
