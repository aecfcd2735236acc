/* DemoApp: the shopping cart, a class.
 *
 * Test-fixture source (see index.js for the notation). Do not move the marked line:
 *   [js-frame 4] line 24, col 19 (`computeTotal`) / col 31 (`(`): Cart#checkout calls
 *                the helper computeTotal() of pricing.js
 */
import {computeTotal} from './pricing';
import {formatMoney} from './util';

export class Cart {
  constructor(currency) {
    this.currency = currency;
    this.items = [];
    this.fees = [{sku: 'SHIPPING', price: 499, qty: 1}];
  }

  add(item) {
    this.items.push(item);
    return this;
  }

  checkout() {
    // the helper in pricing.js
    const total = computeTotal(this.items, this.fees, 0.2); // [js-frame 4]
    return formatMoney(total, this.currency);
  }
}
