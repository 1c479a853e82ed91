// Page routing: picks the page for the current path, re-renders on history navigation, and turns
// clicks on links marked data-nav into history pushes (no full reload).
import { queryPage } from './query.js';
import { explorePage } from './explore.js';
import { cardinalityPage } from './cardinality.js';
import { storagePage } from './storage.js';
import { rulesPage } from './rules.js';
import { alertsPage } from './alerts.js';
import { api } from './api.js';
import { mountTenantPicker } from './tenant.js';

const pages = {
  '/': ['query', queryPage],
  '/graph': ['query', queryPage],
  '/explore': ['explore', explorePage],
  '/cardinality': ['cardinality', cardinalityPage],
  '/storage': ['storage', storagePage],
  '/rules': ['rules', rulesPage],
  '/alerts': ['alerts', alertsPage],
};

const titles = { query: 'Query', explore: 'Explore', cardinality: 'Cardinality', storage: 'Storage', rules: 'Rules', alerts: 'Alerts' };

function render() {
  const [name, page] = pages[location.pathname] || pages['/'];
  for (const a of document.querySelectorAll('nav a[data-page]')) {
    if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${titles[name]} · saltdb`;
  const main = document.getElementById('page');
  main.replaceChildren();
  main.dataset.page = name;
  page(main);
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-nav]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  history.pushState(null, '', a.href);
  render();
  document.getElementById('page').focus({ preventScroll: true });
});

window.addEventListener('popstate', render);
render();
mountTenantPicker(api);
