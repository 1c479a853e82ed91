// The tenant picker of a saltdb serving tenants (--tenants): the tenant typed here is kept in
// this browser (localStorage) and sent by api.js as the X-Scope-OrgID header of every request,
// so every page shows that tenant's series only. Shown only when the server has tenants on;
// a token bound to a tenant (--tenant-tokens-file) decides the tenant itself, which the picker
// then shows.
import { h } from './dom.js';

const KEY = 'saltdb.tenant';

// The tenant to name in requests, or null (the default tenant, or the token's).
export function tenant() {
  return localStorage.getItem(KEY);
}

// Asks the server whether it serves tenants and as which tenant this browser reads, and if so
// puts the picker into the page header.
export async function mountTenantPicker(api) {
  let status;
  try {
    status = (await api('/api/v1/status/tenant')).data;
  } catch {
    return;
  }
  if (!status.tenants) return;
  const input = h('input', { id: 'tenant-input', value: tenant() || status.tenant, spellcheck: 'false', autocomplete: 'off', 'aria-describedby': 'tenant-now' });
  const now = h('span', { id: 'tenant-now', class: 'tenant-now' }, `reading as ${status.tenant}`);
  const form = h('form', { id: 'tenant', class: 'tenant', role: 'search' }, h('label', {}, 'Tenant ', input), now);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const chosen = input.value.trim();
    if (chosen && chosen !== 'default') localStorage.setItem(KEY, chosen);
    else localStorage.removeItem(KEY);
    location.reload();
  });
  document.querySelector('header.top').append(form);
}
