// Autocomplete of the expression box: metric names (and PromQL functions) where an identifier
// is typed, label names inside `{...}`, label values after `name="`. Candidates come from the
// API (/api/v1/label/__name__/values, /api/v1/labels, /api/v1/label/<name>/values). The list is
// a WAI-ARIA listbox driven from the box: arrows move, Enter or Tab accepts, Escape closes.
// Names outside the legacy character sets are offered as sent and inserted quoted, as Prometheus
// 3 reads them (`{"service.name"="`, `{"my.metric"}`).
import { cachedApi } from './api.js';
import { h } from './dom.js';
import { labelName, metricSelector } from './format.js';

const FUNCTIONS = [
  'abs', 'absent', 'absent_over_time', 'avg', 'avg_over_time', 'ceil', 'changes', 'clamp', 'clamp_max',
  'clamp_min', 'count', 'count_over_time', 'count_values', 'delta', 'deriv', 'exp', 'floor',
  'histogram_quantile', 'holt_winters', 'idelta', 'increase', 'irate', 'label_join', 'label_replace',
  'last_over_time', 'ln', 'log2', 'log10', 'max', 'max_over_time', 'min', 'min_over_time',
  'predict_linear', 'quantile', 'quantile_over_time', 'rate', 'resets', 'round', 'scalar', 'sort',
  'sort_desc', 'sqrt', 'stddev', 'stddev_over_time', 'sum', 'sum_over_time', 'time', 'timestamp',
  'topk', 'bottomk', 'vector', 'without', 'by', 'offset',
];
const MAX_SHOWN = 50;

// What the text before the cursor asks for: {kind, prefix, metric?, label?}, or null.
export function contextAt(text) {
  const braces = /([a-zA-Z_:][a-zA-Z0-9_:]*)?\{([^{}]*)$/.exec(text);
  if (braces) {
    const metric = braces[1] || '';
    const inside = braces[2];
    const value = /(?:([a-zA-Z_][a-zA-Z0-9_]*)|"((?:[^"\\]|\\.)*)")\s*(?:=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)$/.exec(inside);
    if (value) return { kind: 'value', label: value[1] ?? unquote(value[2]), prefix: value[3], metric };
    const name = /(?:^|,)\s*([a-zA-Z_][a-zA-Z0-9_]*)?$/.exec(inside);
    if (name) return { kind: 'label', prefix: name[1] || '', metric };
    const quoted = /(?:^|,)\s*"((?:[^"\\]|\\.)*)$/.exec(inside);
    if (quoted) return { kind: 'label', prefix: unquote(quoted[1]), typed: quoted[1].length + 1, metric };
    return null;
  }
  if (/"[^"]*$/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, ''))) return null;
  const word = /[a-zA-Z_:][a-zA-Z0-9_:]*$/.exec(text);
  if (word) return { kind: 'metric', prefix: word[0] };
  return null;
}

// The text of a PromQL string literal's inside (`a\"b` -> `a"b`).
function unquote(inside) {
  try {
    return JSON.parse(`"${inside}"`);
  } catch {
    return inside;
  }
}

async function candidates(ctx) {
  const match = ctx.metric ? { 'match[]': ctx.metric } : {};
  if (ctx.kind === 'metric') {
    const { data } = await cachedApi('/api/v1/label/__name__/values');
    return [...data.map((m) => ({ text: m, kind: 'metric' })), ...FUNCTIONS.map((f) => ({ text: f, kind: 'function' }))];
  }
  if (ctx.kind === 'label') {
    const { data } = await cachedApi('/api/v1/labels', match);
    return data.filter((n) => n !== '__name__').map((n) => ({ text: n, kind: 'label' }));
  }
  const { data } = await cachedApi(`/api/v1/label/${encodeURIComponent(ctx.label)}/values`, match);
  return data.map((v) => ({ text: v, kind: 'value' }));
}

// Attaches autocomplete to `box` (a textarea); `onEnter` runs when Enter is pressed with the
// list closed.
export function attachAutocomplete(box, onEnter) {
  const list = h('ul', { id: 'autocomplete-list', role: 'listbox', class: 'autocomplete', hidden: true, 'aria-label': 'Suggestions' });
  box.setAttribute('role', 'combobox');
  box.setAttribute('aria-autocomplete', 'list');
  box.setAttribute('aria-controls', list.id);
  box.setAttribute('aria-expanded', 'false');
  let items = [];
  let active = -1;
  let ctx = null;
  let generation = 0;

  const close = () => {
    list.hidden = true;
    items = [];
    active = -1;
    box.setAttribute('aria-expanded', 'false');
    box.removeAttribute('aria-activedescendant');
  };
  const highlight = (i) => {
    active = i;
    [...list.children].forEach((li, j) => li.setAttribute('aria-selected', String(j === i)));
    const li = list.children[i];
    if (li) {
      box.setAttribute('aria-activedescendant', li.id);
      li.scrollIntoView({ block: 'nearest' });
    }
  };
  const accept = (i) => {
    const item = items[i];
    if (!item || !ctx) return;
    const cursor = box.selectionStart;
    // A quoted label name being typed is replaced whole, its opening quote included.
    const before = box.value.slice(0, cursor - (ctx.typed ?? ctx.prefix.length));
    const insert = {
      value: () => item.text.replace(/["\\]/g, '\\$&'),
      label: () => labelName(item.text),
      metric: () => metricSelector(item.text),
      function: () => item.text,
    }[item.kind]();
    box.value = before + insert + box.value.slice(cursor);
    const at = before.length + insert.length;
    box.setSelectionRange(at, at);
    close();
    box.focus();
  };
  const update = async () => {
    const mine = ++generation;
    ctx = contextAt(box.value.slice(0, box.selectionStart));
    if (!ctx || (ctx.kind === 'metric' && ctx.prefix.length < 1)) return close();
    let all;
    try {
      all = await candidates(ctx);
    } catch {
      return close();
    }
    if (mine !== generation) return;
    const p = ctx.prefix.toLowerCase();
    items = all.filter((c) => c.text.toLowerCase().startsWith(p) && c.text !== ctx.prefix).slice(0, MAX_SHOWN);
    if (!items.length) return close();
    list.replaceChildren(
      ...items.map((c, i) =>
        h(
          'li',
          {
            id: `ac-${i}`,
            role: 'option',
            'aria-selected': 'false',
            'data-kind': c.kind,
            on: { mousedown: (e) => { e.preventDefault(); accept(i); } },
          },
          h('span', { class: 'ac-text' }, c.text),
          h('span', { class: 'ac-kind' }, c.kind),
        ),
      ),
    );
    list.hidden = false;
    box.setAttribute('aria-expanded', 'true');
    highlight(0);
  };

  box.addEventListener('input', update);
  box.addEventListener('blur', () => setTimeout(close, 100));
  box.addEventListener('keydown', (e) => {
    const open = !list.hidden && items.length > 0;
    if (open && e.key === 'ArrowDown') {
      e.preventDefault();
      highlight((active + 1) % items.length);
    } else if (open && e.key === 'ArrowUp') {
      e.preventDefault();
      highlight((active - 1 + items.length) % items.length);
    } else if (open && (e.key === 'Enter' || e.key === 'Tab')) {
      e.preventDefault();
      accept(active);
    } else if (open && e.key === 'Escape') {
      e.preventDefault();
      close();
    } else if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      onEnter();
    }
  });
  return list;
}
