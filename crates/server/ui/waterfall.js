// The span tree as a waterfall on the trace's time axis, virtualised: only
// the rows in view (and a few either side) exist in the document, so a trace
// of any size scrolls as a small one does.

import { duration, el, fill } from './format.js';
import { ancestors, visibleRows } from './model.js';

/** Height of one row in pixels: `--row` in style.css. */
export const ROW_HEIGHT = 24;
/** Rows kept in the document beyond each edge of the view. */
const OVERSCAN = 12;
/** Deepest indentation drawn; deeper spans line up at this depth. */
const MAX_INDENT = 40;

export class Waterfall {
  constructor({ rows, spacer, ticks }, onSelect) {
    this.box = rows;
    this.spacer = spacer;
    this.ticks = ticks;
    this.onSelect = onSelect;
    this.trace = null;
    this.rows = [];
    this.collapsed = new Set();
    this.selected = null;
    this.window = null;
    this.frame = 0;
    rows.addEventListener('scroll', () => this.schedule());
    rows.addEventListener('click', (e) => this.click(e));
    rows.addEventListener('keydown', (e) => this.key(e));
    new ResizeObserver(() => this.schedule()).observe(rows);
  }

  /** Shows `trace`, every subtree expanded, `selected` (a span) chosen. */
  show(trace, selected) {
    this.trace = trace;
    this.collapsed = new Set();
    this.selected = null;
    this.box.scrollTop = 0;
    this.drawAxis();
    this.refresh();
    if (selected) this.select(selected, { center: true });
  }

  drawAxis() {
    const t = this.trace.total;
    fill(this.ticks, [0, 0.25, 0.5, 0.75].map((f) => {
      const tick = el('span', {}, duration(t * f));
      tick.style.left = `${f * 100}%`;
      return tick;
    }));
  }

  /** Recomputes the visible rows after a collapse or expand. */
  refresh() {
    this.rows = visibleRows(this.trace, this.collapsed);
    this.index = new Map(this.rows.map((s, i) => [s, i]));
    this.spacer.style.height = `${this.rows.length * ROW_HEIGHT}px`;
    this.window = null;
    this.render();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    if (!this.trace) return;
    const top = this.box.scrollTop;
    const height = this.box.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.rows.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    if (this.window && this.window[0] === first && this.window[1] === last) return;
    this.window = [first, last];
    const nodes = [this.spacer];
    for (let i = first; i < last; i++) nodes.push(this.row(this.rows[i], i));
    this.box.replaceChildren(...nodes);
  }

  row(span, i) {
    const open = !this.collapsed.has(span);
    const hasKids = span.children.length > 0;
    const toggle = el('button', {
      type: 'button',
      class: hasKids ? 'toggle' : 'toggle leaf',
      tabindex: -1,
      'aria-label': hasKids ? `${open ? 'Collapse' : 'Expand'} ${span.descendants} spans` : undefined,
      title: hasKids ? `${open ? 'Collapse' : 'Expand'} (${span.descendants} spans below)` : undefined,
    }, hasKids ? (open ? '▾' : '▸') : '');
    const swatch = el('span', { class: 'swatch' });
    swatch.style.backgroundColor = span.colour;
    const label = el('div', { class: 'span-label' },
      toggle, swatch,
      el('span', { class: 'service' }, span.service),
      el('span', { class: 'name' }, span.name),
      span.error && el('span', { class: 'badge error', title: span.status.message || 'error status' }, 'error'),
      span.orphan && el('span', { class: 'badge orphan', title: `parent ${span.parentId} is not in this trace` }, 'missing parent'),
      span.cycle && el('span', { class: 'badge orphan', title: 'its parents lead back to it' }, 'parent cycle'),
      !open && el('span', { class: 'badge orphan', title: 'collapsed' }, `+${span.descendants}`));
    label.style.paddingLeft = `${4 + Math.min(span.depth, MAX_INDENT) * 14}px`;

    const total = this.trace.total;
    const left = (span.offset / total) * 100;
    const width = (span.duration / total) * 100;
    const bar = el('div', { class: span.error ? 'bar error' : 'bar' });
    bar.style.left = `${left}%`;
    bar.style.width = `${width}%`;
    bar.style.backgroundColor = span.colour;
    // The duration beside the bar, or inside it when neither side has room.
    const text = el('span', { class: 'bar-label' }, duration(span.duration));
    if (left + width <= 80) {
      text.style.left = `calc(${left + width}% + 4px)`;
    } else if (left >= 15) {
      text.style.right = `calc(${100 - left}% + 4px)`;
    } else {
      text.classList.add('inside');
      text.style.left = `calc(${left}% + 4px)`;
    }

    const row = el('div', {
      class: span === this.selected ? 'span-row selected' : 'span-row',
      role: 'treeitem',
      'aria-level': span.depth + 1,
      'aria-expanded': hasKids ? String(open) : undefined,
      'aria-selected': String(span === this.selected),
      'data-index': i,
      'data-span-id': span.id,
    }, label, el('div', { class: 'span-time' }, bar, text));
    row.style.top = `${i * ROW_HEIGHT}px`;
    return row;
  }

  click(e) {
    const row = e.target.closest('.span-row');
    if (!row) return;
    const span = this.rows[Number(row.dataset.index)];
    if (!span) return;
    if (e.target.closest('.toggle')) {
      this.toggle(span);
    } else {
      this.select(span);
    }
    this.box.focus({ preventScroll: true });
  }

  key(e) {
    if (!this.trace || this.rows.length === 0) return;
    const at = this.selected ? this.index.get(this.selected) ?? 0 : -1;
    const go = (i) => this.select(this.rows[Math.max(0, Math.min(this.rows.length - 1, i))]);
    switch (e.key) {
      case 'ArrowDown': go(at + 1); break;
      case 'ArrowUp': go(at - 1); break;
      case 'PageDown': go(at + Math.floor(this.box.clientHeight / ROW_HEIGHT)); break;
      case 'PageUp': go(at - Math.floor(this.box.clientHeight / ROW_HEIGHT)); break;
      case 'Home': go(0); break;
      case 'End': go(this.rows.length - 1); break;
      case 'ArrowRight':
        if (this.selected && this.collapsed.has(this.selected)) this.toggle(this.selected);
        break;
      case 'ArrowLeft':
        if (this.selected && this.selected.children.length && !this.collapsed.has(this.selected)) {
          this.toggle(this.selected);
        } else if (this.selected) {
          const [parent] = ancestors(this.trace, this.selected);
          if (parent) this.select(parent);
        }
        break;
      default: return;
    }
    e.preventDefault();
  }

  /** Collapses or expands the subtree under `span`. */
  toggle(span) {
    if (this.collapsed.has(span)) this.collapsed.delete(span);
    else if (span.children.length) this.collapsed.add(span);
    this.refresh();
  }

  expandAll() {
    this.collapsed.clear();
    this.refresh();
    if (this.selected) this.reveal(this.selected);
  }

  /** Collapses every span that has children: the roots remain. */
  collapseAll() {
    this.collapsed = new Set(this.trace.spans.filter((s) => s.children.length));
    this.refresh();
  }

  /** Selects `span`: its ancestors expanded, the row in view, the details shown. */
  select(span, { center = false } = {}) {
    let opened = false;
    for (const a of ancestors(this.trace, span)) opened = this.collapsed.delete(a) || opened;
    this.selected = span;
    if (opened) this.refresh();
    this.reveal(span, center);
    this.window = null;
    this.render();
    this.onSelect(span);
  }

  reveal(span, center = false) {
    const i = this.index.get(span);
    if (i === undefined) return;
    const view = this.box.clientHeight || 600;
    const y = i * ROW_HEIGHT;
    if (center) this.box.scrollTop = Math.max(0, y - view / 2);
    else if (y < this.box.scrollTop) this.box.scrollTop = y;
    else if (y + ROW_HEIGHT > this.box.scrollTop + view) this.box.scrollTop = y + ROW_HEIGHT - view;
  }
}
