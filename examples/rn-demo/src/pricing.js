/* DemoApp: pricing, nested functions.
 *
 * Test-fixture source (see index.js for the notation). Do not move the marked lines:
 *   [js-frame 0] line 22, col 15 (`new`) / col 24 (`(`): the throw site,
 *                `throw new Error('price missing')` in the arrow function passed to map
 *   (frame 1 is Array.prototype.map itself: native code, no source position)
 *   [js-frame 2] line 20, col 17 (`map`) / col 20 (`(`): lineTotals calls list.map()
 *   [js-frame 3] line 29, col 20 (`lineTotals`) / col 30 (`(`): computeTotal calls
 *                its inner function lineTotals()
 * lineTotals is called twice, so that the minifier does not inline it: terser inlines a
 * function that is called once, and its frame would be gone from the stack.
 */

export function computeTotal(items, fees, taxRate) {
  // an inner named function; the arrow function passed to map is the innermost

  function lineTotals(list) {
    // items without a price are a bug: throw
    // the call into Array.prototype.map
    return list.map((item) => { // [js-frame 2]
      if (typeof item.price !== 'number') {
        throw new Error('price missing'); // [js-frame 0]
      }
      return item.price * item.qty;
    });
  }

  const sum = (total, t) => total + t;
  const subtotal = lineTotals(items).reduce(sum, 0); // [js-frame 3]
  const extra = lineTotals(fees).reduce(sum, 0);
  return Math.round((subtotal + extra) * (1 + taxRate));
}
