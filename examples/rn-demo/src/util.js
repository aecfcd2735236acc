/* DemoApp: a tiny AppRegistry (like React Native's) and a formatting helper.
 *
 * Test-fixture source (see index.js). Do not move the marked line:
 *   line 21 col 12  AppRegistry.runApplication: `component(props)`  [js-frame 6] call
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
    return component(props); // [js-frame 6]
  },
};

export function formatMoney(cents, currency) {
  return (cents / 100).toFixed(2) + ' ' + currency;
}
