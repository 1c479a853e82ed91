// The range-query graph, hand-written SVG: one line per series (gaps where samples are
// missing), time and value axes, a legend whose entries toggle their line, a readout of the
// values nearest the pointer (or the keyboard cursor: focus the plot, then arrows, Page Up/Down,
// Home/End, Escape), and drag-to-zoom (select a time span to query it).
import { h } from './dom.js';
import { seriesName, utc } from './format.js';

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
const HEIGHT = 320;
const PAD = { left: 64, right: 16, top: 12, bottom: 28 };

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

// Round tick values covering [lo, hi], about `count` of them.
export function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  const last = Math.ceil(hi / step) * step;
  // A step below the values' float resolution would never move `v`.
  for (let v = Math.floor(lo / step) * step; v <= last + step * 1e-9 && out.length <= 4 * count + 2; v += step) {
    out.push(Number(v.toPrecision(12)));
  }
  return out;
}

const TIME_STEPS = [1, 5, 10, 15, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800].map((s) => s * 1000);

function timeTicks(lo, hi, count) {
  const step = TIME_STEPS.find((s) => (hi - lo) / s <= count) || TIME_STEPS[TIME_STEPS.length - 1];
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return { ticks: out, step };
}

function timeLabel(t, step, spanMs) {
  const s = utc(t);
  if (spanMs > 2 * 86400e3) return step >= 86400e3 ? s.slice(5, 10) : s.slice(5, 16);
  return step < 60e3 ? s.slice(11, 19) : s.slice(11, 16);
}

function shortNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toPrecision(3)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`;
  return String(+v.toPrecision(4));
}

// Draws `result` (a matrix) for [startMs, endMs] at `stepMs` into a new element; `onZoom(from,
// to)` is called with the span the user drags over.
export function graph(result, { startMs, endMs, stepMs, onZoom }) {
  const series = result.map((s, i) => ({
    name: seriesName(s.metric),
    color: color(i),
    points: s.values.map(([t, v]) => [t * 1000, Number(v)]),
    visible: true,
  }));
  const wrap = h('div', { class: 'graph' });
  const plot = h('div', { class: 'plot' });
  const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' });
  const readout = h('div', { class: 'readout', hidden: true, role: 'status' });
  wrap.append(plot, readout, legend);

  let drawnWidth = 0;
  const draw = () => {
    const width = Math.max(plot.clientWidth || 800, 300);
    drawnWidth = width;
    const shown = series.filter((s) => s.visible);
    const values = shown.flatMap((s) => s.points.map((p) => p[1]).filter(Number.isFinite));
    let lo = values.length ? Math.min(...values) : 0;
    let hi = values.length ? Math.max(...values) : 1;
    // A flat line (also one that rounding made uneven: 0.9999999999999999 and 1) gets a
    // range around it.
    if (hi - lo <= Math.max(Math.abs(lo), Math.abs(hi)) * 1e-9) {
      const mid = (lo + hi) / 2;
      lo = mid - (Math.abs(mid) * 0.1 || 1);
      hi = mid + (Math.abs(mid) * 0.1 || 1);
    }
    const yTicks = niceTicks(lo, hi, 5);
    lo = Math.min(lo, yTicks[0]);
    hi = Math.max(hi, yTicks[yTicks.length - 1]);
    const x = (t) => PAD.left + ((t - startMs) / (endMs - startMs || 1)) * (width - PAD.left - PAD.right);
    const y = (v) => PAD.top + (1 - (v - lo) / (hi - lo)) * (HEIGHT - PAD.top - PAD.bottom);
    const { ticks: xTicks, step: xStep } = timeTicks(startMs, endMs, Math.max(2, Math.floor(width / 110)));
    const svg = h('svg:svg', {
      width,
      height: HEIGHT,
      viewBox: `0 0 ${width} ${HEIGHT}`,
      role: 'group',
      'aria-label': `Graph of ${series.length} series from ${utc(startMs)} to ${utc(endMs)} UTC`,
    });
    for (const v of yTicks) {
      svg.append(h('svg:line', { class: 'grid', x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v) }));
      svg.append(h('svg:text', { class: 'tick', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, shortNumber(v)));
    }
    for (const t of xTicks) {
      svg.append(h('svg:line', { class: 'grid', x1: x(t), x2: x(t), y1: PAD.top, y2: HEIGHT - PAD.bottom }));
      svg.append(h('svg:text', { class: 'tick', x: x(t), y: HEIGHT - 8, 'text-anchor': 'middle' }, timeLabel(t, xStep, endMs - startMs)));
    }
    for (const s of shown) {
      let d = '';
      let prev = null;
      for (const [t, v] of s.points) {
        if (!Number.isFinite(v)) {
          prev = null;
          continue;
        }
        d += `${prev === null || t - prev > stepMs * 1.5 ? 'M' : 'L'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
        prev = t;
      }
      // A lone point would be an invisible path: draw it as a dot too.
      if (s.points.length === 1) svg.append(h('svg:circle', { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 2.5, fill: s.color }));
      svg.append(h('svg:path', { class: 'series', d, stroke: s.color, 'data-series': s.name }));
    }
    const cursor = h('svg:line', { class: 'cursor', y1: PAD.top, y2: HEIGHT - PAD.bottom, visibility: 'hidden' });
    const selection = h('svg:rect', { class: 'selection', y: PAD.top, height: HEIGHT - PAD.top - PAD.bottom, visibility: 'hidden' });
    const overlay = h('svg:rect', {
      class: 'overlay',
      x: PAD.left,
      y: PAD.top,
      width: width - PAD.left - PAD.right,
      height: HEIGHT - PAD.top - PAD.bottom,
      tabindex: '0',
      role: 'slider',
      'aria-label': 'Time cursor: arrows move one step, Page Up and Page Down ten, Home and End to the ends',
      'aria-valuemin': startMs,
      'aria-valuemax': endMs,
    });
    svg.append(cursor, selection, overlay);
    const hideCursor = () => {
      cursor.setAttribute('visibility', 'hidden');
      readout.hidden = true;
    };
    // The keyboard cursor: a time on the step grid, shown like the pointer's.
    let keyMs = null;
    const placeAt = (t) => {
      keyMs = Math.min(Math.max(t, startMs), endMs);
      const px = x(keyMs);
      cursor.setAttribute('x1', px);
      cursor.setAttribute('x2', px);
      cursor.setAttribute('visibility', 'visible');
      showReadout(keyMs, px, width);
      overlay.setAttribute('aria-valuenow', keyMs);
      overlay.setAttribute('aria-valuetext', `${utc(keyMs)} UTC`);
    };
    overlay.addEventListener('focus', () => placeAt(keyMs ?? endMs));
    overlay.addEventListener('blur', hideCursor);
    overlay.addEventListener('keydown', (e) => {
      const moves = { ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1, PageUp: -10, PageDown: 10 };
      if (e.key in moves) placeAt((keyMs ?? endMs) + moves[e.key] * stepMs);
      else if (e.key === 'Home') placeAt(startMs);
      else if (e.key === 'End') placeAt(endMs);
      else if (e.key === 'Escape') hideCursor();
      else return;
      e.preventDefault();
    });
    const timeAt = (px) => startMs + ((px - PAD.left) / (width - PAD.left - PAD.right)) * (endMs - startMs);
    const localX = (e) => e.clientX - svg.getBoundingClientRect().left;
    let dragFrom = null;
    overlay.addEventListener('mousedown', (e) => {
      dragFrom = localX(e);
      e.preventDefault();
    });
    overlay.addEventListener('mousemove', (e) => {
      const px = localX(e);
      cursor.setAttribute('x1', px);
      cursor.setAttribute('x2', px);
      cursor.setAttribute('visibility', 'visible');
      showReadout(timeAt(px), px, width);
      if (dragFrom !== null) {
        selection.setAttribute('x', Math.min(dragFrom, px));
        selection.setAttribute('width', Math.abs(px - dragFrom));
        selection.setAttribute('visibility', 'visible');
      }
    });
    overlay.addEventListener('mouseleave', () => {
      cursor.setAttribute('visibility', 'hidden');
      readout.hidden = true;
      dragFrom = null;
      selection.setAttribute('visibility', 'hidden');
    });
    overlay.addEventListener('mouseup', (e) => {
      const px = localX(e);
      if (dragFrom !== null && Math.abs(px - dragFrom) > 4 && onZoom) {
        const [a, b] = [timeAt(Math.min(dragFrom, px)), timeAt(Math.max(dragFrom, px))];
        dragFrom = null;
        onZoom(Math.round(a), Math.round(b));
        return;
      }
      dragFrom = null;
      selection.setAttribute('visibility', 'hidden');
    });
    plot.replaceChildren(svg);
  };

  // The value of each visible series nearest to time `t`.
  const showReadout = (t, px, width) => {
    const rows = [];
    for (const s of series.filter((s) => s.visible)) {
      let best = null;
      for (const p of s.points) if (best === null || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
      if (best && Math.abs(best[0] - t) <= stepMs) rows.push(h('div', {}, h('span', { class: 'swatch', style: `background:${s.color}` }), `${s.name}: `, h('strong', {}, String(best[1]))));
    }
    readout.replaceChildren(h('div', { class: 'readout-time' }, `${utc(t)} UTC`), ...rows);
    readout.hidden = false;
    readout.style.left = `${Math.max(Math.min(px + 16, width - 340), 0)}px`;
  };

  series.forEach((s) => {
    const button = h(
      'button',
      {
        type: 'button',
        class: 'legend-item',
        'aria-pressed': 'true',
        title: 'Show or hide this series',
        on: {
          click: () => {
            s.visible = !s.visible;
            button.setAttribute('aria-pressed', String(s.visible));
            draw();
          },
        },
      },
      h('span', { class: 'swatch', style: `background:${s.color}` }),
      h('span', { class: 'legend-label' }, s.name),
    );
    legend.append(h('li', {}, button));
  });
  // Drawn once attached, when the plot's width is known, and again when the window resizes.
  requestAnimationFrame(draw);
  const resize = new ResizeObserver(() =>
    requestAnimationFrame(() => {
      if (Math.max(plot.clientWidth || 800, 300) !== drawnWidth) draw();
    }),
  );
  resize.observe(plot);
  return wrap;
}
