// Formatting of label sets, numbers, byte sizes, times and durations.

// Names as PromQL writes them: legacy names bare, any other UTF-8 name (`service.name`,
// `tag,x`, `名前`) quoted, as Prometheus 3 writes and reads them.
const LEGACY_LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const LEGACY_METRIC = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

export function isLegacyLabelName(name) {
  return LEGACY_LABEL.test(name);
}

export function quote(s) {
  return JSON.stringify(String(s));
}

// A label name as it stands before `=` in a selector.
export function labelName(name) {
  return isLegacyLabelName(name) ? name : quote(name);
}

// The selector of every series of metric `name`: `up`, or `{"my.metric"}`.
export function metricSelector(name) {
  return LEGACY_METRIC.test(name) ? name : `{${quote(name)}}`;
}

// A series as Prometheus 3's UI prints it: `name{a="x", "service.name"="y"}`, or with the
// name quoted inside the braces when it is not a legacy name (`{"my.metric", a="x"}`).
export function seriesName(metric) {
  const { __name__: name = '', ...rest } = metric || {};
  const labels = Object.keys(rest)
    .sort()
    .map((k) => `${labelName(k)}=${quote(rest[k])}`);
  if (name && !LEGACY_METRIC.test(name)) return `{${[quote(name), ...labels].join(', ')}}`;
  return labels.length ? `${name}{${labels.join(', ')}}` : name || '{}';
}

export function number(n) {
  if (typeof n !== 'number') n = Number(n);
  if (!Number.isFinite(n)) return String(n);
  return n.toLocaleString('en-US', { maximumFractionDigits: 2 });
}

// A sample value as Prometheus prints it: the string as received.
export function sampleValue(v) {
  return String(v);
}

export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

// `2024-05-31 12:00:00` in UTC (the format of Prometheus' end-time box).
export function utc(ms) {
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, '');
}

export function parseUtc(s) {
  const m = /^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d)(?::(\d\d))?Z?$/.exec(String(s).trim());
  if (!m) return NaN;
  return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
}

const UNITS = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 604800e3, y: 31536000e3 };

// `1h30m` -> ms; NaN when not a duration.
export function parseDuration(s) {
  const text = String(s).trim();
  if (!/^(\d+[smhdwy])+$/.test(text)) return NaN;
  let ms = 0;
  for (const [, n, u] of text.matchAll(/(\d+)([smhdwy])/g)) ms += Number(n) * UNITS[u];
  return ms;
}

export function formatDuration(ms) {
  let rest = Math.round(ms / 1000);
  if (rest <= 0) return '0s';
  let out = '';
  for (const [u, secs] of [['w', 604800], ['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    if (rest >= secs) {
      out += `${Math.floor(rest / secs)}${u}`;
      rest %= secs;
    }
  }
  return out;
}

// A Prometheus RFC 3339 time (`2024-05-31T12:00:00.123Z`) as ms since the epoch; NaN for Go's
// zero time (`0001-01-01T00:00:00Z`, "never") and for anything unreadable.
export function parseRfc3339(s) {
  if (typeof s !== 'string' || s.startsWith('0001-01-01')) return NaN;
  return Date.parse(s);
}

// How long ago `ms` was, in its two largest units: `42s ago`, `3m12s ago`, `2d4h ago`.
export function ago(ms, now = Date.now()) {
  const d = now - ms;
  const short = (x) => (formatDuration(x).match(/\d+[wdhms]/g) || ['0s']).slice(0, 2).join('');
  return d >= 0 ? `${short(d)} ago` : `in ${short(-d)}`;
}

// A measured duration in seconds as Prometheus' rules page prints one: `1.234ms`, `2.500s`.
export function seconds(s) {
  const n = Number(s);
  if (!Number.isFinite(n)) return String(s);
  return n >= 1 ? `${n.toFixed(3)}s` : `${(n * 1000).toFixed(3)}ms`;
}
