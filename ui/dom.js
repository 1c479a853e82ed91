// Building DOM nodes: h('tag', {attributes, on: {event: fn}}, ...children) and a few shared
// pieces (alerts, tables).

export function h(tag, attrs = {}, ...children) {
  const el = tag.startsWith('svg:')
    ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// An alert as Prometheus' UI shows them: errors red, warnings yellow, infos blue; `label` leads
// the text.
export function alert(kind, message, label = { error: 'Error', warning: 'Warning', info: 'Info' }[kind]) {
  return h('div', { class: `alert ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('strong', {}, `${label}: `), message);
}

// A table inside a horizontally scrolling box (narrow screens), with a caption for screen readers.
export function table(caption, headers, rows, attrs = {}) {
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      attrs,
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows),
    ),
  );
}

// A labelled form field.
export function field(label, control) {
  return h('label', { class: 'field' }, h('span', {}, label), control);
}
