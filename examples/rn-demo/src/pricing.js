/* DemoApp: pricing, nested functions.
 *
 * Test-fixture source (see index.js). Do not move the marked lines:
 *   line 16 col 19  arrow in lineTotals: `new Error(...)`     [js-frame 0] throw site
 *   (frame 1 is Array.prototype.map itself: native, no source position)
 *   line 14 col 17  lineTotals:   `list.map(...)`   [js-frame 2] call (col 12 = `list`)
 *   line 24 col 20  computeTotal: `lineTotals(items)`         [js-frame 3] call
 * lineTotals is called twice, so that the minifier does not inline it (terser inlines a
 * function called once, and its frame would be gone from the stack).
 */

export function computeTotal(items, fees, taxRate) {
  // an inner named function; the arrow function passed to map is the innermost
  function lineTotals(list) {
    // items without a price are a bug: throw
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
