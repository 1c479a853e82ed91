// The cardinality page, like VictoriaMetrics' cardinality explorer: for a day and an optional
// series selector, the top metric names, label names, label=value pairs by series count and
// label names by distinct values, from /api/v1/status/tsdb. Clicking a metric name narrows the
// selector to it. The state (date, match[], topN) is in the URL.
import { api } from './api.js';
import { alert, field, h, table } from './dom.js';
import { number, quote } from './format.js';

function readState() {
  const p = new URLSearchParams(location.search);
  return { date: p.get('date') || new Date().toISOString().slice(0, 10), match: p.get('match[]') || '', topN: p.get('topN') || '10' };
}

export function cardinalityPage(main) {
  const state = readState();
  const date = h('input', { id: 'card-date', type: 'date', value: state.date });
  const match = h('input', { id: 'card-match', class: 'wide', value: state.match, placeholder: 'e.g. {job="node"}', spellcheck: 'false' });
  const topN = h('input', { id: 'card-topn', type: 'number', min: 1, max: 10000, value: state.topN, class: 'short' });
  const form = h(
    'form',
    { class: 'controls', role: 'search' },
    field('Date (UTC)', date),
    field('Series selector (match[])', match),
    field('Top N', topN),
    h('button', { type: 'submit', class: 'primary' }, 'Show'),
  );
  const out = h('div', { id: 'cardinality-output', 'aria-live': 'polite' });
  main.append(h('h1', {}, 'Cardinality'), form, out);

  const load = async (push) => {
    const s = { date: date.value, 'match[]': match.value.trim(), topN: topN.value };
    const p = new URLSearchParams(Object.entries(s).filter(([, v]) => v));
    const url = `/cardinality?${p}`;
    if (url !== location.pathname + location.search) history[push ? 'pushState' : 'replaceState'](null, '', url);
    out.replaceChildren(h('p', { class: 'empty' }, 'Loading…'));
    try {
      const { data } = await api('/api/v1/status/tsdb', s);
      out.replaceChildren(...render(data, (metric) => {
        match.value = `{__name__=${quote(metric)}}`;
        load(true);
      }));
    } catch (e) {
      out.replaceChildren(alert('error', e.message));
    }
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    load(true);
  });
  load(false);
}

function render(d, focusMetric) {
  const total = d.totalSeries || 0;
  const share = (v) => (total ? (100 * v) / total : 0);
  const bar = (pct) => h('span', { class: 'bar', 'aria-hidden': 'true' }, h('span', { style: `width:${Math.min(pct, 100).toFixed(1)}%` }));
  const list = (caption, head, stats, opts = {}) =>
    h(
      'section',
      { class: 'card' },
      h('h2', {}, caption),
      stats.length
        ? table(
            caption,
            [head, opts.valueHead || 'Series', opts.noShare ? '' : '% of series'],
            stats.map((s) =>
              h(
                'tr',
                {},
                h('td', { class: 'series' }, opts.link ? h('a', { href: '#', on: { click: (e) => { e.preventDefault(); opts.link(s.name); } } }, s.name) : s.name),
                h('td', { class: 'num' }, number(s.value)),
                h('td', { class: 'share' }, opts.noShare ? '' : [bar(share(s.value)), ` ${share(s.value).toFixed(1)}%`]),
              ),
            ),
            { id: opts.id },
          )
        : h('p', { class: 'empty' }, 'No series.'),
    );
  return [
    h(
      'p',
      { class: 'totals' },
      h('span', {}, 'Total series: ', h('strong', { id: 'total-series' }, number(total))),
      h('span', {}, 'Total label=value pairs: ', h('strong', {}, number(d.totalLabelValuePairs || 0))),
    ),
    h(
      'div',
      { class: 'cards' },
      list('Metric names with the most series', 'Metric name', d.seriesCountByMetricName, { id: 'top-metrics', link: focusMetric }),
      list('Label names with the most series', 'Label name', d.seriesCountByLabelName, { id: 'top-labels' }),
      list('Label=value pairs with the most series', 'Label=value pair', d.seriesCountByLabelValuePair, { id: 'top-pairs' }),
      list('Label names with the most values', 'Label name', d.labelValueCountByLabelName, { id: 'top-values', valueHead: 'Values', noShare: true }),
    ),
  ];
}
