// The rules page, like Prometheus' /rules: every rule group from /api/v1/rules (name, file,
// interval, last evaluation, evaluation time) with its recording and alerting rules (query as a
// link to the query page, labels, health and last error, last evaluation, evaluation time; an
// alerting rule's for, keep_firing_for, state and active alerts). A filter box (rule or group
// name) and a type filter, kept in the URL. Also the pieces the alerts page shares.
import { api } from './api.js';
import { alert, field, h, table } from './dom.js';
import { ago, formatDuration, labelName, parseRfc3339, quote, seconds, utc } from './format.js';

// A link to the query page's table tab running `expr`, the expression in monospace.
export function queryLink(expr) {
  const p = new URLSearchParams({ 'g0.expr': expr, 'g0.tab': '1' });
  return h('a', { href: `/graph?${p}`, 'data-nav': true, class: 'expr-link' }, h('code', {}, expr));
}

// A label set as chips (`severity="page"`), sorted by name; nothing for an empty set.
export function labelChips(labels, caption) {
  const names = Object.keys(labels || {}).sort();
  if (!names.length) return null;
  return h('ul', { class: 'chips', 'aria-label': caption }, names.map((k) => h('li', { class: 'chip' }, `${labelName(k)}=${quote(labels[k])}`)));
}

// A time from the API, relative (`12s ago`) with the UTC time on hover; `never` for Go's zero
// time.
export function when(rfc3339) {
  const ms = parseRfc3339(rfc3339);
  if (!Number.isFinite(ms)) return h('span', { class: 'never' }, 'never');
  return h('time', { datetime: new Date(ms).toISOString(), title: `${utc(ms)} UTC` }, ago(ms));
}

// An alert or rule state (firing, pending, inactive) as a coloured badge.
export function stateBadge(state) {
  return h('span', { class: `state ${state}` }, state);
}

// The page body when the server evaluates no rules.
export function noRules(what = 'rules') {
  return h(
    'div',
    { class: 'empty-state' },
    h('p', {}, `No ${what} are configured.`),
    h(
      'p',
      { class: 'hint' },
      'Start saltdb with ',
      h('code', {}, '--rule-file rules.yml'),
      ' (repeatable; globs allowed) to evaluate Prometheus recording and alerting rule files; ',
      h('code', {}, 'POST /-/reload'),
      ' or SIGHUP reads them again. See ',
      h('code', {}, 'docs/rules.md'),
      '.',
    ),
  );
}

const TYPES = ['all', 'alerting', 'recording'];

function readState() {
  const p = new URLSearchParams(location.search);
  const type = p.get('type');
  return { search: p.get('search') || '', type: TYPES.includes(type) ? type : 'all' };
}

export async function rulesPage(main) {
  const state = readState();
  const filter = h('input', { id: 'rule-filter', type: 'search', value: state.search, placeholder: 'rule or group name contains…', class: 'wide' });
  const type = h('select', { id: 'rule-type' }, TYPES.map((t) => h('option', { value: t, selected: t === state.type }, t)));
  const refresh = h('button', { type: 'button', id: 'rules-refresh' }, 'Refresh');
  const summary = h('p', { class: 'hint', id: 'rules-summary', 'aria-live': 'polite' });
  const out = h('div', { id: 'rules-output', class: 'groups' }, h('p', { class: 'empty' }, 'Loading…'));
  main.append(
    h('h1', {}, 'Rules'),
    h('div', { class: 'controls', role: 'search' }, field('Filter', filter), field('Type', type), refresh),
    summary,
    out,
  );

  let groups = null;
  const draw = () => {
    if (!groups) return;
    const url = new URLSearchParams(Object.entries({ search: filter.value.trim(), type: type.value === 'all' ? '' : type.value }).filter(([, v]) => v));
    const href = `/rules${url.toString() ? `?${url}` : ''}`;
    if (href !== location.pathname + location.search) history.replaceState(null, '', href);
    if (!groups.length) {
      summary.textContent = '';
      out.replaceChildren(noRules());
      return;
    }
    const f = filter.value.trim().toLowerCase();
    const total = groups.reduce((n, g) => n + g.rules.length, 0);
    let shownRules = 0;
    const shown = [];
    for (const g of groups) {
      const groupMatches = g.name.toLowerCase().includes(f);
      const rules = g.rules.filter((r) => (type.value === 'all' || r.type === type.value) && (groupMatches || r.name.toLowerCase().includes(f)));
      if (!rules.length && (f || type.value !== 'all')) continue;
      shownRules += rules.length;
      shown.push(groupCard(g, rules));
    }
    summary.textContent = `${shownRules} of ${total} rules in ${shown.length} of ${groups.length} groups.`;
    out.replaceChildren(...(shown.length ? shown : [h('p', { class: 'empty' }, 'No rule matches the filter.')]));
  };

  const load = async () => {
    refresh.disabled = true;
    try {
      groups = (await api('/api/v1/rules')).data.groups || [];
      draw();
    } catch (e) {
      summary.textContent = '';
      out.replaceChildren(alert('error', e.message));
    } finally {
      refresh.disabled = false;
    }
  };
  filter.addEventListener('input', draw);
  type.addEventListener('change', draw);
  refresh.addEventListener('click', load);
  await load();
}

function groupCard(g, rules) {
  const meta = [
    ['File', h('code', {}, g.file)],
    ['Interval', formatDuration(g.interval * 1000)],
    ['Last evaluation', when(g.lastEvaluation)],
    ['Evaluation time', seconds(g.evaluationTime)],
  ];
  if (g.limit) meta.push(['Limit', String(g.limit)]);
  return h(
    'section',
    { class: 'card rule-group', 'aria-label': `Rule group ${g.name}` },
    h('h2', {}, g.name),
    h('dl', { class: 'meta' }, meta.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v)))),
    rules.length
      ? table(
          `Rules of group ${g.name}`,
          ['Rule', 'Type', 'State', 'Health', 'Last evaluation', 'Evaluation time'],
          rules.map(ruleRow),
          { class: 'rules' },
        )
      : h('p', { class: 'empty' }, 'This group has no rules.'),
  );
}

function ruleRow(r) {
  const alerting = r.type === 'alerting';
  const alerts = r.alerts || [];
  const timing = alerting
    ? h(
        'div',
        { class: 'rule-for' },
        `for ${formatDuration(r.duration * 1000)}`,
        r.keepFiringFor ? ` · keep firing for ${formatDuration(r.keepFiringFor * 1000)}` : null,
      )
    : null;
  return h(
    'tr',
    { 'data-rule': r.name, 'data-type': r.type },
    h('th', { scope: 'row', class: 'rule' }, h('div', { class: 'rule-name' }, r.name), queryLink(r.query), timing, labelChips(r.labels, `Labels of ${r.name}`)),
    h('td', {}, h('span', { class: `kind ${r.type}` }, r.type)),
    h('td', {}, alerting ? [stateBadge(r.state), h('div', { class: 'hint' }, `${alerts.length} ${alerts.length === 1 ? 'alert' : 'alerts'}`)] : '–'),
    h('td', { class: 'health-cell' }, h('span', { class: `health ${r.health}` }, r.health), r.health === 'err' && r.lastError ? h('div', { class: 'rule-error' }, r.lastError) : null),
    h('td', { class: 'time' }, when(r.lastEvaluation)),
    h('td', { class: 'num' }, seconds(r.evaluationTime)),
  );
}
