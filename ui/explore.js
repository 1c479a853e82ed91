// The explore page: every metric name with its series count today (from /api/v1/status/tsdb),
// its TYPE/HELP metadata (/api/v1/metadata), a filter box, and per metric its label names with
// their values (/api/v1/labels, /api/v1/label/<name>/values restricted by match[]).
import { api } from './api.js';
import { alert, field, h, table } from './dom.js';
import { metricSelector, number } from './format.js';

const VALUES_SHOWN = 20;

// A link to the query page showing `expr`; `text` is what the link says (`expr` by default).
function queryLink(expr, text = expr) {
  const p = new URLSearchParams({ 'g0.expr': expr, 'g0.tab': '1' });
  return h('a', { href: `/graph?${p}`, 'data-nav': true }, text);
}

export async function explorePage(main) {
  const filter = h('input', { id: 'metric-filter', type: 'search', placeholder: 'metric name contains…' });
  const summary = h('p', { class: 'hint', 'aria-live': 'polite' });
  const body = h('div', {}, h('p', { class: 'empty' }, 'Loading…'));
  const detail = h('section', { id: 'metric-detail', class: 'detail', 'aria-live': 'polite' });
  main.append(h('h1', {}, 'Explore metrics'), h('div', { class: 'controls' }, field('Filter', filter)), summary, detail, body);

  let names;
  let metadata;
  let counts;
  try {
    const [n, m] = await Promise.all([api('/api/v1/label/__name__/values'), api('/api/v1/metadata')]);
    names = n.data;
    metadata = m.data;
    const t = await api('/api/v1/status/tsdb', { topN: Math.min(Math.max(names.length, 1), 10000) });
    counts = new Map(t.data.seriesCountByMetricName.map((s) => [s.name, s.value]));
  } catch (e) {
    body.replaceChildren(alert('error', e.message));
    return;
  }

  const showDetail = async (metric) => {
    detail.replaceChildren(h('h2', {}, `Labels of ${metric}`), h('p', { class: 'empty' }, 'Loading…'));
    const selector = metricSelector(metric);
    try {
      const { data: labels } = await api('/api/v1/labels', { 'match[]': selector });
      const rows = await Promise.all(
        labels
          .filter((l) => l !== '__name__')
          .map(async (l) => {
            const { data: values } = await api(`/api/v1/label/${encodeURIComponent(l)}/values`, { 'match[]': selector });
            const shown = values.slice(0, VALUES_SHOWN).join(', ') + (values.length > VALUES_SHOWN ? `, … (${values.length - VALUES_SHOWN} more)` : '');
            return h('tr', {}, h('th', { scope: 'row' }, l), h('td', { class: 'num' }, number(values.length)), h('td', {}, shown));
          }),
      );
      detail.replaceChildren(
        h('h2', {}, 'Labels of ', queryLink(selector, metric)),
        rows.length ? table(`Label names and values of ${metric}`, ['Label', 'Values', 'Some values'], rows) : h('p', { class: 'empty' }, 'No labels besides the name.'),
      );
    } catch (e) {
      detail.replaceChildren(alert('error', e.message));
    }
  };

  const draw = () => {
    const f = filter.value.trim().toLowerCase();
    const shown = names.filter((n) => n.toLowerCase().includes(f));
    summary.textContent = `${shown.length} of ${names.length} metrics; series counted for today (UTC).`;
    const rows = shown.map((name) => {
      const meta = (metadata[name] || [])[0] || {};
      return h(
        'tr',
        {},
        h('td', {}, queryLink(metricSelector(name), name)),
        h('td', {}, meta.type || ''),
        h('td', { class: 'help' }, meta.help || ''),
        h('td', { class: 'num' }, number(counts.get(name) || 0)),
        h('td', {}, h('button', { type: 'button', class: 'small', on: { click: () => showDetail(name) } }, 'Labels')),
      );
    });
    body.replaceChildren(table('Metrics', ['Metric', 'Type', 'Help', 'Series today', ''], rows, { id: 'metrics-table' }));
  };
  filter.addEventListener('input', draw);
  draw();
}
