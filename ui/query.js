// The query page: an expression box with autocomplete, a table tab (instant query at the end
// time) and a graph tab (range query over [end - range, end] at a step), query statistics,
// errors and warnings. The state lives in the URL with Prometheus' parameter names (g0.expr,
// g0.tab: 0 graph / 1 table, g0.range_input, g0.end_input, g0.step_input, and Thanos'
// g0.max_source_resolution), so a link - also one made by Prometheus' own UI - reproduces the
// view. Where the server keeps downsampled tiers, the graph tab offers the resolution to read.
import { api } from './api.js';
import { attachAutocomplete } from './autocomplete.js';
import { alert, field, h, table } from './dom.js';
import { formatDuration, number, parseDuration, parseUtc, sampleValue, seriesName, utc } from './format.js';
import { graph } from './graph.js';

const RANGE_STEPS = ['1m', '5m', '15m', '30m', '1h', '2h', '6h', '12h', '1d', '2d', '1w', '2w', '4w'];

function readState() {
  const p = new URLSearchParams(location.search);
  return {
    expr: p.get('g0.expr') || '',
    tab: p.get('g0.tab') === '1' ? 'table' : 'graph',
    range: p.get('g0.range_input') || '1h',
    end: p.get('g0.end_input') || '',
    step: p.get('g0.step_input') || '',
    resolution: readResolution(p.get('g0.max_source_resolution')),
  };
}

// `auto` (also for an absent value), `raw` (Thanos' UI writes `0s`), or a tier interval.
function readResolution(v) {
  if (!v || v === 'auto') return 'auto';
  if (v === '0s' || v === '0' || v === 'raw') return 'raw';
  return v;
}

function writeState(s, push) {
  const p = new URLSearchParams();
  p.set('g0.expr', s.expr);
  p.set('g0.tab', s.tab === 'table' ? '1' : '0');
  p.set('g0.range_input', s.range);
  if (s.end) p.set('g0.end_input', s.end);
  if (s.step) p.set('g0.step_input', s.step);
  if (s.resolution && s.resolution !== 'auto') p.set('g0.max_source_resolution', s.resolution);
  const url = `/graph?${p}`;
  if (url !== location.pathname + location.search) history[push ? 'pushState' : 'replaceState'](null, '', url);
}

// Prometheus' default resolution: about 250 points per series, at least 1 s.
function defaultStepMs(rangeMs) {
  return Math.max(Math.floor(rangeMs / 250 / 1000), 1) * 1000;
}

export function queryPage(main) {
  const state = readState();
  const box = h('textarea', {
    id: 'expr',
    class: 'expr',
    rows: 2,
    spellcheck: 'false',
    autocomplete: 'off',
    placeholder: 'Expression (press Shift+Enter for newlines)',
    'aria-label': 'Expression',
  });
  box.value = state.expr;
  const execute = h('button', { type: 'button', class: 'primary', id: 'execute' }, 'Execute');
  const list = attachAutocomplete(box, () => run(true));
  const tabTable = h('button', { type: 'button', role: 'tab', id: 'tab-table' }, 'Table');
  const tabGraph = h('button', { type: 'button', role: 'tab', id: 'tab-graph' }, 'Graph');
  const rangeInput = h('input', { id: 'range', class: 'short', value: state.range, title: 'e.g. 1h, 30m, 2d' });
  const endInput = h('input', { id: 'end', class: 'time', value: state.end, placeholder: 'now' });
  const stepInput = h('input', { id: 'step', class: 'short', value: state.step, placeholder: 'auto' });
  const resolutionSelect = h(
    'select',
    { id: 'resolution', title: 'Downsampled tiers the graph may read (max_source_resolution)' },
    h('option', { value: 'auto' }, 'auto'),
    h('option', { value: 'raw' }, 'raw'),
  );
  // The intervals the server keeps tiers of (none: the field stays hidden).
  let tierIntervals = [];
  const shift = (dir) => {
    const ms = parseDuration(rangeInput.value);
    const i = RANGE_STEPS.findIndex((r) => parseDuration(r) >= ms);
    const j = Math.min(Math.max((i < 0 ? RANGE_STEPS.length : i) + dir, 0), RANGE_STEPS.length - 1);
    rangeInput.value = RANGE_STEPS[j];
    run(true);
  };
  const rangeParts = h(
    'span',
    { class: 'range-parts' },
    h('button', { type: 'button', 'aria-label': 'Shorter range', on: { click: () => shift(-1) } }, '−'),
    field('Range', rangeInput),
    h('button', { type: 'button', 'aria-label': 'Longer range', on: { click: () => shift(1) } }, '+'),
  );
  const endText = h('span', {}, 'End (UTC)');
  const stepField = field('Step', stepInput);
  const resolutionField = field('Resolution', resolutionSelect);
  resolutionField.hidden = true;
  const controls = h(
    'div',
    { class: 'controls' },
    rangeParts,
    h('label', { class: 'field' }, endText, endInput),
    stepField,
    resolutionField,
  );
  const status = h('div', { class: 'status', id: 'query-stats', 'aria-live': 'polite' });
  const messages = h('div', { class: 'messages' });
  const output = h('div', { class: 'output', id: 'output' });

  main.append(
    h('h1', { class: 'visually-hidden' }, 'Query'),
    h('div', { class: 'expr-row' }, h('div', { class: 'expr-wrap' }, box, list), execute),
    h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Result view' }, tabTable, tabGraph),
    controls,
    status,
    messages,
    output,
  );

  const showTab = () => {
    tabTable.setAttribute('aria-selected', String(state.tab === 'table'));
    tabGraph.setAttribute('aria-selected', String(state.tab === 'graph'));
    // Roving focus (WAI-ARIA tabs): only the selected tab is in the Tab order.
    tabTable.tabIndex = state.tab === 'table' ? 0 : -1;
    tabGraph.tabIndex = state.tab === 'graph' ? 0 : -1;
    rangeParts.hidden = state.tab === 'table';
    stepField.hidden = state.tab === 'table';
    // The table's instant query reads as `auto` does (points only where raw samples are gone).
    resolutionField.hidden = state.tab === 'table' || tierIntervals.length === 0;
    endText.textContent = state.tab === 'table' ? 'Evaluation time (UTC)' : 'End (UTC)';
  };
  tabTable.addEventListener('click', () => { state.tab = 'table'; showTab(); run(true); });
  tabGraph.addEventListener('click', () => { state.tab = 'graph'; showTab(); run(true); });
  // Arrow keys, Home and End move between the tabs and select the one they reach.
  for (const tab of [tabTable, tabGraph]) {
    tab.addEventListener('keydown', (e) => {
      const order = [tabTable, tabGraph];
      const i = order.indexOf(tab);
      const next = { ArrowLeft: i - 1, ArrowRight: i + 1, Home: 0, End: order.length - 1 }[e.key];
      if (next === undefined) return;
      e.preventDefault();
      const target = order[(next + order.length) % order.length];
      target.focus();
      target.click();
    });
  }
  execute.addEventListener('click', () => run(true));
  resolutionSelect.addEventListener('change', () => run(true));
  for (const input of [rangeInput, endInput, stepInput]) {
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') run(true); });
  }

  let generation = 0;
  async function run(push) {
    state.expr = box.value.trim();
    state.range = rangeInput.value.trim() || '1h';
    state.end = endInput.value.trim();
    state.step = stepInput.value.trim();
    if (tierIntervals.length) state.resolution = resolutionSelect.value;
    writeState(state, push);
    messages.replaceChildren();
    if (!state.expr) {
      output.replaceChildren(h('p', { class: 'empty' }, 'Enter an expression, e.g. up or rate(http_requests_total[5m]).'));
      status.textContent = '';
      return;
    }
    // Tiers answer steps whose windows fall on their intervals: a graph ending now ends on a
    // multiple of its step (as Grafana aligns a panel), where tiers may be read.
    const mayReadTiers = tierIntervals.length > 0 && state.resolution !== 'raw';
    let endMs = state.end ? parseUtc(state.end) : Date.now();
    const rangeMs = parseDuration(state.range);
    const stepMs = state.step ? parseDuration(state.step) || Number(state.step) * 1000 : defaultStepMs(rangeMs);
    const problems = [];
    if (!Number.isFinite(endMs)) problems.push(`end time ${JSON.stringify(state.end)} is not like 2024-05-31 12:00:00`);
    if (state.tab === 'graph' && !(rangeMs > 0)) problems.push(`range ${JSON.stringify(state.range)} is not a duration like 1h`);
    if (state.tab === 'graph' && !(stepMs > 0)) problems.push(`step ${JSON.stringify(state.step)} is not a duration like 15s`);
    if (problems.length) {
      messages.replaceChildren(...problems.map((p) => alert('error', p)));
      return;
    }
    if (!state.end && mayReadTiers && state.tab === 'graph') endMs -= endMs % stepMs;
    const resolution = state.resolution === 'auto' ? undefined : state.resolution;
    const mine = ++generation;
    status.textContent = 'Loading…';
    execute.disabled = true;
    const started = performance.now();
    try {
      const answer =
        state.tab === 'graph'
          ? await api('/api/v1/query_range', {
              query: state.expr,
              start: (endMs - rangeMs) / 1000,
              end: endMs / 1000,
              step: stepMs / 1000,
              stats: 'all',
              max_source_resolution: resolution,
            })
          : await api('/api/v1/query', { query: state.expr, time: endMs / 1000, stats: 'all' });
      if (mine !== generation) return;
      const elapsed = performance.now() - started;
      messages.replaceChildren(...answer.warnings.map((w) => alert('warning', w)), ...answer.infos.map((i) => alert('info', i)));
      status.replaceChildren(...statsLine(answer.data, elapsed));
      if (state.tab === 'graph') showGraph(answer.data, endMs - rangeMs, endMs, stepMs);
      else showTable(answer.data);
    } catch (e) {
      if (mine !== generation) return;
      status.textContent = '';
      output.replaceChildren();
      messages.replaceChildren(alert('error', e.message, 'Error executing query'));
    } finally {
      if (mine === generation) execute.disabled = false;
    }
  }

  function showGraph(data, startMs, endMs, stepMs) {
    if (data.resultType !== 'matrix') {
      output.replaceChildren(alert('error', `the graph needs a range query result, got ${data.resultType}`));
      return;
    }
    if (!data.result.length) {
      output.replaceChildren(h('p', { class: 'empty' }, 'Empty query result'));
      return;
    }
    const onZoom = (from, to) => {
      endInput.value = utc(to);
      rangeInput.value = formatDuration(Math.max(to - from, 1000));
      run(true);
    };
    output.replaceChildren(graph(data.result, { startMs, endMs, stepMs, onZoom }));
  }

  function showTable(data) {
    let rows;
    if (data.resultType === 'vector') {
      rows = data.result.map((s) => h('tr', {}, h('td', { class: 'series' }, seriesName(s.metric)), h('td', { class: 'value' }, sampleValue(s.value[1]))));
    } else if (data.resultType === 'matrix') {
      rows = data.result.map((s) =>
        h('tr', {}, h('td', { class: 'series' }, seriesName(s.metric)), h('td', { class: 'value' }, s.values.map(([t, v]) => h('div', {}, `${v} @${t}`)))),
      );
    } else {
      rows = [h('tr', {}, h('td', { class: 'series' }, data.resultType), h('td', { class: 'value' }, sampleValue(data.result[1])))];
    }
    if (!rows.length) {
      output.replaceChildren(h('p', { class: 'empty' }, 'Empty query result'));
      return;
    }
    output.replaceChildren(table('Query result', ['Series', 'Value'], rows, { id: 'result-table' }));
  }

  // The tiers the server keeps, then the first run (with the resolution of the URL).
  const ready = api('/api/v1/status/storage')
    .then(({ data }) => {
      const kept = new Set(data.tierIntervalsMs || []);
      for (const a of data.downsampleAfter || []) kept.add(a.intervalMs);
      tierIntervals = [...kept].filter((ms) => ms > 0).sort((a, b) => a - b);
    })
    .catch(() => { tierIntervals = []; })
    .then(() => {
      for (const ms of tierIntervals) resolutionSelect.append(h('option', { value: formatDuration(ms) }, formatDuration(ms)));
      if (state.resolution !== 'auto' && ![...resolutionSelect.options].some((o) => o.value === state.resolution)) {
        // A resolution the server does not list (a link from elsewhere): kept, and sent as is.
        resolutionSelect.append(h('option', { value: state.resolution }, state.resolution));
      }
      resolutionSelect.value = state.resolution;
      showTab();
    });
  showTab();
  if (state.expr) ready.then(() => run(false));
  else output.replaceChildren(h('p', { class: 'empty' }, 'Enter an expression, e.g. up or rate(http_requests_total[5m]).'));
  box.focus();
}

// "Load time: 12 ms · Result series: 3 · Samples: 1,234" (samples when the server sends
// Prometheus' stats object).
function statsLine(data, elapsedMs) {
  const parts = [`Load time: ${Math.round(elapsedMs)} ms`];
  if (Array.isArray(data.result) && data.resultType !== 'scalar' && data.resultType !== 'string') {
    parts.push(`Result series: ${data.result.length}`);
  }
  const s = data.stats;
  if (s && s.samples) {
    if (s.samples.totalQueryableSamples !== undefined) parts.push(`Samples: ${number(s.samples.totalQueryableSamples)}`);
    if (s.samples.peakSamples !== undefined) parts.push(`Peak samples: ${number(s.samples.peakSamples)}`);
    // saltdb's own: the downsampled tiers read, each point counted above as a sample.
    const tiers = Object.entries(s.samples.tierPoints || {});
    if (tiers.length) parts.push(`Tiers: ${tiers.map(([t, n]) => `${t} (${number(n)} points)`).join(', ')}`);
  }
  if (s && s.timings && s.timings.evalTotalTime !== undefined) parts.push(`Eval: ${(s.timings.evalTotalTime * 1000).toFixed(1)} ms`);
  return [parts.join(' · ')];
}
