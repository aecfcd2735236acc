/* DemoApp: a tiny AppRegistry (like React Native's) and a formatting helper.
 *
 * Test-fixture source (see index.js for the notation). Do not move the marked line:
 *   [js-frame 6] line 23, col 12 (`component`) / col 21 (`(`): runApplication calls
 *                the registered component
 */

const registry = {};

export const AppRegistry = {
  registerComponent(name, provider) {
    registry[name] = provider;
    return name;
  },

  runApplication(name, props) {
    const provider = registry[name];
    if (provider == null) {
      throw new Error('no such application: ' + name);
    }
    const component = provider();
    // the call into index.js
    return component(props); // [js-frame 6]
  },
};

export function formatMoney(cents, currency) {
  return (cents / 100).toFixed(2) + ' ' + currency;
}
