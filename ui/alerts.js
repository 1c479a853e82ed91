// The alerts page, like Prometheus' /alerts: the alerting rules from /api/v1/rules?type=alert
// grouped by state (firing, pending, inactive) with counts, each rule expandable to its
// definition and its alerts (labels as chips, annotations, state, active since, value). A filter
// box (rule, group or label) and a checkbox per state, kept in the URL.
import { api } from './api.js';
import { alert, field, h, table } from './dom.js';
import { formatDuration, sampleValue } from './format.js';
import { labelChips, noRules, queryLink, stateBadge, when } from './rules.js';

const STATES = ['firing', 'pending', 'inactive'];
const TITLES = { firing: 'Firing', pending: 'Pending', inactive: 'Inactive' };

function readState() {
  const p = new URLSearchParams(location.search);
  const hidden = (p.get('hide') || '').split(',');
  return { search: p.get('search') || '', show: Object.fromEntries(STATES.map((s) => [s, !hidden.includes(s)])) };
}

export async function alertsPage(main) {
  const state = readState();
  const filter = h('input', { id: 'alert-filter', type: 'search', value: state.search, placeholder: 'rule, group or label contains…', class: 'wide' });
  const boxes = Object.fromEntries(STATES.map((s) => [s, h('input', { type: 'checkbox', id: `show-${s}`, checked: state.show[s] })]));
  const counts = Object.fromEntries(STATES.map((s) => [s, h('span', { class: 'count' })]));
  const toggles = h(
    'fieldset',
    { class: 'states' },
    h('legend', {}, 'Show'),
    STATES.map((s) => h('label', {}, boxes[s], ' ', stateBadge(s), ' ', counts[s])),
  );
  const refresh = h('button', { type: 'button', id: 'alerts-refresh' }, 'Refresh');
  const out = h('div', { id: 'alerts-output' }, h('p', { class: 'empty' }, 'Loading…'));
  main.append(h('h1', {}, 'Alerts'), h('div', { class: 'controls', role: 'search' }, field('Filter', filter), toggles, refresh), out);

  // [{group, rule}] of every alerting rule; which rules are expanded survives a refresh.
  let rules = null;
  const open = new Set();
  const key = (r) => `${r.group.file}\u0000${r.group.name}\u0000${r.rule.name}`;

  const draw = () => {
    if (!rules) return;
    const p = new URLSearchParams();
    if (filter.value.trim()) p.set('search', filter.value.trim());
    const hidden = STATES.filter((s) => !boxes[s].checked);
    if (hidden.length) p.set('hide', hidden.join(','));
    const href = `/alerts${p.toString() ? `?${p}` : ''}`;
    if (href !== location.pathname + location.search) history.replaceState(null, '', href);
    if (!rules.length) {
      for (const s of STATES) counts[s].textContent = '(0)';
      out.replaceChildren(noRules('alerting rules'));
      return;
    }
    const f = filter.value.trim().toLowerCase();
    const matches = ({ group, rule }) =>
      !f ||
      [rule.name, group.name, ...(rule.alerts || []).flatMap((a) => Object.entries(a.labels || {}).map(([k, v]) => `${k}=${v}`))].some((t) =>
        t.toLowerCase().includes(f),
      );
    const sections = [];
    for (const s of STATES) {
      const inState = rules.filter((r) => (STATES.includes(r.rule.state) ? r.rule.state : 'inactive') === s && matches(r));
      counts[s].textContent = `(${inState.length})`;
      if (!boxes[s].checked) continue;
      sections.push(
        h(
          'section',
          { class: `alert-state ${s}`, id: `alerts-${s}`, 'aria-labelledby': `alerts-${s}-title` },
          h('h2', { id: `alerts-${s}-title` }, `${TITLES[s]} (${inState.length})`),
          inState.length ? h('ul', { class: 'alert-rules' }, inState.map((r) => h('li', {}, ruleDetails(r, open, key(r))))) : h('p', { class: 'empty' }, `No ${s} alerting rules.`),
        ),
      );
    }
    out.replaceChildren(...(sections.length ? sections : [h('p', { class: 'empty' }, 'Every state is hidden.')]));
  };

  const load = async () => {
    refresh.disabled = true;
    try {
      const { data } = await api('/api/v1/rules', { type: 'alert' });
      rules = (data.groups || []).flatMap((group) => group.rules.filter((rule) => rule.type === 'alerting').map((rule) => ({ group, rule })));
      draw();
    } catch (e) {
      out.replaceChildren(alert('error', e.message));
    } finally {
      refresh.disabled = false;
    }
  };
  filter.addEventListener('input', draw);
  for (const s of STATES) boxes[s].addEventListener('change', draw);
  refresh.addEventListener('click', load);
  await load();
}

function ruleDetails({ group, rule }, open, key) {
  const alerts = rule.alerts || [];
  const details = h(
    'details',
    { class: `alert-rule ${rule.state}`, 'data-rule': rule.name, open: open.has(key) },
    h(
      'summary',
      {},
      h('span', { class: 'rule-name' }, rule.name),
      ' ',
      h('span', { class: 'count' }, `(${alerts.length} active)`),
      ' ',
      h('span', { class: 'hint' }, `group ${group.name}`),
    ),
    h('div', { class: 'alert-rule-body' }, definition(rule), alertsTable(rule, alerts)),
  );
  details.addEventListener('toggle', () => (details.open ? open.add(key) : open.delete(key)));
  return details;
}

// The rule as its file states it.
function definition(rule) {
  const rows = [
    ['alert', h('span', { class: 'rule-name' }, rule.name)],
    ['expr', queryLink(rule.query)],
    ['for', formatDuration(rule.duration * 1000)],
  ];
  if (rule.keepFiringFor) rows.push(['keep_firing_for', formatDuration(rule.keepFiringFor * 1000)]);
  const labels = labelChips(rule.labels, `Labels of rule ${rule.name}`);
  if (labels) rows.push(['labels', labels]);
  const annotations = annotationList(rule.annotations);
  if (annotations) rows.push(['annotations', annotations]);
  if (rule.health === 'err') rows.push(['error', h('span', { class: 'rule-error' }, rule.lastError)]);
  return h('dl', { class: 'definition' }, rows.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
}

function annotationList(annotations) {
  const names = Object.keys(annotations || {}).sort();
  if (!names.length) return null;
  return h('dl', { class: 'annotations' }, names.map((k) => h('div', {}, h('dt', {}, k), h('dd', {}, annotations[k]))));
}

function alertsTable(rule, alerts) {
  if (!alerts.length) return h('p', { class: 'empty' }, 'No active alerts.');
  return table(
    `Alerts of ${rule.name}`,
    ['Labels', 'State', 'Active since', 'Value', 'Annotations'],
    alerts.map((a) =>
      h(
        'tr',
        {},
        h('td', {}, labelChips(a.labels, 'Labels')),
        h('td', {}, stateBadge(a.state), a.keepFiringSince ? h('div', { class: 'hint' }, 'kept firing since ', when(a.keepFiringSince)) : null),
        h('td', { class: 'time' }, when(a.activeAt)),
        h('td', { class: 'value' }, sampleValue(a.value)),
        h('td', {}, annotationList(a.annotations) || '–'),
      ),
    ),
    { class: 'alerts' },
  );
}
