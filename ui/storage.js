// The storage page: time windows (state, series, samples, bytes, bytes per sample), samples
// written per bucket since start (skew: the fullest bucket against the mean), the in-memory
// head, window length, retention, bytes per table, the flags and build information. On the
// ClickHouse backend: its shards and each server's state and replication instead.
import { api } from './api.js';
import { alert, h, table } from './dom.js';
import { bytes, formatDuration, number, utc } from './format.js';

function section(title, ...content) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...content);
}

function wideSection(title, ...content) {
  const s = section(title, ...content);
  s.classList.add('wide');
  return s;
}

function pairs(caption, entries, id) {
  return table(caption, ['', ''], entries.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v))), { id, class: 'pairs' });
}

export async function storagePage(main) {
  const out = h('div', { class: 'cards' }, h('p', { class: 'empty' }, 'Loading…'));
  main.append(h('h1', {}, 'Storage'), out);
  let windows, storage, flags, build;
  try {
    [storage, flags, build] = (await Promise.all([api('/api/v1/status/storage'), api('/api/v1/status/flags'), api('/api/v1/status/buildinfo')])).map(
      (a) => a.data,
    );
    if (storage.backend === 'clickhouse') {
      out.replaceChildren(clickhouseSection(storage), buildSection(build), flagsSection(flags));
      return;
    }
    windows = (await api('/api/v1/status/windows')).data;
  } catch (e) {
    out.replaceChildren(alert('error', e.message));
    return;
  }
  // With --retention-rule, each retention class keeps its own windows: a column and a table say which.
  const classes = storage.retentionClasses || [];
  const classed = classes.length > 1;
  const windowRows = windows
    .slice()
    .reverse()
    .map((w) =>
      h(
        'tr',
        {},
        ...(classed ? [h('td', {}, w.retentionClass)] : []),
        h('td', { class: 'time' }, utc(w.start)),
        h('td', { class: 'time' }, utc(w.end)),
        h('td', {}, h('span', { class: `state ${w.state}` }, w.state)),
        h('td', { class: 'num' }, number(w.series)),
        h('td', { class: 'num' }, number(w.samples)),
        h('td', { class: 'num' }, bytes(w.bytes)),
        h('td', { class: 'num' }, w.samples ? (w.bytes / w.samples).toFixed(2) : '–'),
      ),
    );
  const written = storage.buckets.samplesWritten;
  const sum = written.reduce((a, b) => a + b, 0);
  const mean = written.length ? sum / written.length : 0;
  const max = Math.max(0, ...written);
  const bucketBars = h(
    'ol',
    { class: 'buckets', 'aria-label': 'Samples written per bucket' },
    written.map((n, i) =>
      h('li', { title: `bucket ${i}: ${number(n)} samples` }, h('span', { class: 'bucket-bar', style: `height:${max ? (100 * n) / max : 0}%` }), h('span', { class: 'bucket-id' }, i)),
    ),
  );
  out.replaceChildren(
    wideSection(
      'Time windows',
      windowRows.length
        ? table(
            'Time windows, newest first',
            [...(classed ? ['Class'] : []), 'Start (UTC)', 'End (UTC)', 'State', 'Series', 'Samples', 'Bytes', 'Bytes/sample'],
            windowRows,
            { id: 'windows-table' },
          )
        : h('p', { class: 'empty' }, 'No windows yet: nothing has been written.'),
    ),
    ...(classed ? [classesSection(classes)] : []),
    section(
      'Writes per bucket',
      h('p', {}, `${number(sum)} samples written since start over ${written.length} buckets (${storage.buckets.scheme}); fullest bucket ${mean ? (max / mean).toFixed(2) : '–'}× the mean.`),
      bucketBars,
    ),
    section(
      'Head and retention',
      pairs(
        'Head and retention',
        [
          ['Head samples', `${number(storage.head.samples)} of ${number(storage.head.maxSamples)}`],
          ['Head flush interval', formatDuration(storage.head.flushIntervalMs)],
          ['Window length', formatDuration(storage.windowMs)],
          ['Retention', storage.retentionMs ? formatDuration(storage.retentionMs) : 'forever'],
          ['Series created since start', number(storage.seriesCreated)],
          ['Series ever created', number(storage.seriesTotal)],
          ['Bytes on disk', bytes(storage.diskBytes)],
          ...Object.entries(storage.tableBytes).map(([t, b]) => [`Table ${t}`, bytes(b)]),
          ['Writes', storage.poisoned ? `refused: ${storage.poisoned}` : 'accepted'],
        ],
        'head-table',
      ),
    ),
    buildSection(build),
    flagsSection(flags),
  );
}

// One row per retention class: the default one (--retention) and one per retention of
// --retention-rule, with the rules that send series to it (first match wins).
function classesSection(classes) {
  const rows = classes.map((c) =>
    h(
      'tr',
      {},
      h('td', {}, c.name),
      h('td', {}, c.retentionMs ? formatDuration(c.retentionMs) : 'forever'),
      h('td', {}, c.rules.length ? c.rules.join(', ') : c.name === 'default' ? 'series no rule matches' : 'no rule (kept from an earlier run)'),
      h('td', { class: 'num' }, number(c.windows)),
      h('td', { class: 'num' }, bytes(c.bytes)),
    ),
  );
  return wideSection('Retention classes', table('Retention classes', ['Class', 'Retention', 'Rules', 'Windows', 'Bytes'], rows, { id: 'classes-table' }));
}

function buildSection(build) {
  return section('Build information', pairs('Build information', [['Application', build.application || 'saltdb'], ['Version', build.version]], 'build-table'));
}

function flagsSection(flags) {
  const flagRows = Object.entries(flags).map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, `--${k}`), h('td', {}, v)));
  return wideSection(
    'Flags',
    flagRows.length ? table('Command-line flags', ['Flag', 'Value'], flagRows, { id: 'flags-table' }) : h('p', { class: 'empty' }, 'Started without a command line: no flags to show.'),
  );
}

// One row per ClickHouse server: its shard, URL, whether it answers and takes the shard's
// requests, and on replicated shards its replication.
function clickhouseSection(storage) {
  const rows = storage.shards.flatMap((s) =>
    s.replicas.map((r) => {
      const state = r.up ? (r.current ? 'current' : 'standby') : 'down';
      const replication = !r.up
        ? r.error
        : r.readonly === undefined
          ? '–'
          : r.readonly
            ? 'read-only: no ZooKeeper'
            : `queue ${number(r.queue)}, ${r.delaySeconds} s behind, ${r.activeReplicas} of ${r.totalReplicas} replicas live`;
      return h(
        'tr',
        {},
        h('td', { class: 'num' }, s.shard),
        h('td', {}, r.url),
        h('td', {}, h('span', { class: `state ${r.up ? 'up' : 'down'}` }, state)),
        h('td', {}, replication),
      );
    }),
  );
  const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const summary = `Database ${storage.database} on ${plural(storage.shards.length, 'shard')}, ${storage.buckets} buckets; ${
    storage.replicated ? `replicated, writes acknowledged by ${plural(storage.insertQuorum, 'replica')}` : 'not replicated'
  }; retention ${storage.retentionMs ? formatDuration(storage.retentionMs) : 'forever'}.`;
  return wideSection('ClickHouse', h('p', {}, summary), table('ClickHouse servers', ['Shard', 'Server', 'State', 'Replication'], rows, { id: 'clickhouse-table' }));
}
