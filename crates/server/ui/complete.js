// Completion in the TraceQL box: attribute names from the tag API where a
// name is being typed, and values of that attribute (narrowed by the rest of
// the query) after a comparison.

import { el, fill, traceqlString } from './format.js';

/** What is being typed before the cursor: a name, a value, or nothing to complete. */
export function context(text) {
  // A value after a comparison: quoted and unfinished, or bare.
  const quoted = /([A-Za-z_.:][\w.:\-/]*)\s*(=~|!~|!=|<=|>=|=|<|>)\s*"((?:[^"\\]|\\.)*)$/.exec(text);
  if (quoted) {
    return { type: 'value', tag: quoted[1], partial: quoted[3], from: text.length - quoted[3].length - 1, condition: quoted.index };
  }
  const bare = /([A-Za-z_.:][\w.:\-/]*)\s*(=~|!~|!=|<=|>=|=|<|>)\s*([\w.\-]*)$/.exec(text);
  if (bare) {
    return { type: 'value', tag: bare[1], partial: bare[3], from: text.length - bare[3].length, condition: bare.index };
  }
  // A name inside an open spanset, after `{`, `(`, `&&`, `||` or `!`.
  const opens = (text.match(/\{/g) || []).length - (text.match(/\}/g) || []).length;
  const name = /(^|[{(&|!\s])([A-Za-z_.:][\w.:\-]*|)$/.exec(text);
  if (opens > 0 && name && !/"[^"]*$/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, ''))) {
    const before = text.slice(0, text.length - name[2].length).trimEnd();
    if (/[{(&|!]$/.test(before)) {
      return { type: 'name', partial: name[2], from: text.length - name[2].length };
    }
  }
  return null;
}

/**
 * Attaches completion to `input`, listing in `list`. `source.names()` gives
 * the full names (`resource.service.name`, `span.http.method`, `duration`);
 * `source.values(tag, q)` the `{ type, value }` of a tag, `q` the query
 * without the condition being typed.
 */
export function attachCompletion(input, list, source) {
  let items = [];
  let active = -1;
  let ctx = null;
  let generation = 0;
  let timer = 0;

  const close = () => {
    list.hidden = true;
    input.setAttribute('aria-expanded', 'false');
    items = [];
    active = -1;
  };

  const draw = () => {
    if (items.length === 0) {
      close();
      return;
    }
    fill(list, items.map((item, i) => el('li', {
      role: 'option',
      id: `completion-${i}`,
      'aria-selected': String(i === active),
      'data-index': i,
    }, item.label, item.kind ? el('span', { class: 'kind' }, item.kind) : null)));
    list.hidden = false;
    input.setAttribute('aria-expanded', 'true');
    if (active >= 0) {
      input.setAttribute('aria-activedescendant', `completion-${active}`);
      list.children[active]?.scrollIntoView({ block: 'nearest' });
    } else {
      input.removeAttribute('aria-activedescendant');
    }
  };

  const update = async () => {
    const cursor = input.selectionStart ?? input.value.length;
    const text = input.value.slice(0, cursor);
    ctx = context(text);
    const mine = ++generation;
    if (!ctx) {
      close();
      return;
    }
    let found = [];
    try {
      if (ctx.type === 'name') {
        const names = await source.names();
        const p = ctx.partial.toLowerCase();
        // Names that start with what was typed first, shortest first; then
        // those that only contain it.
        const rank = (n) => (n.name.toLowerCase().startsWith(p) ? 0 : 1);
        found = names
          .filter((n) => n.name.toLowerCase().startsWith(p) || (p.length > 1 && n.name.toLowerCase().includes(p)))
          .sort((a, b) => rank(a) - rank(b) || a.name.length - b.name.length || (a.name < b.name ? -1 : 1))
          .slice(0, 100)
          .map((n) => ({ label: n.name, kind: n.scope, insert: `${n.name} ` }));
      } else {
        const q = text.slice(0, ctx.condition).replace(/(&&|\|\|)\s*$/, '').trimEnd();
        const values = await source.values(ctx.tag, q.includes('{') ? `${q} }` : '');
        const p = ctx.partial.toLowerCase();
        const quotedContext = text[ctx.from] === '"';
        found = values
          .filter((v) => v.value.toLowerCase().includes(p))
          .slice(0, 100)
          .map((v) => ({
            label: v.value,
            kind: v.type,
            insert: v.type === 'string' || quotedContext ? `${traceqlString(v.value)} ` : `${v.value} `,
          }));
      }
    } catch {
      found = []; // completion is a help: a failed lookup shows nothing
    }
    if (mine !== generation) return;
    items = found;
    active = -1; // Enter still searches until an item is chosen with the arrows
    draw();
  };

  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(update, 120);
  };

  const accept = (i) => {
    const item = items[i];
    if (!item || !ctx) return;
    const cursor = input.selectionStart ?? input.value.length;
    const value = input.value;
    // A value replaces what was typed of it and a closing quote already there.
    let end = cursor;
    if (ctx.type === 'value' && value[ctx.from] === '"') {
      const close = value.slice(cursor).search(/(?<!\\)"/);
      if (close >= 0 && !/[&|}]/.test(value.slice(cursor, cursor + close))) end = cursor + close + 1;
    }
    input.value = value.slice(0, ctx.from) + item.insert + value.slice(end).replace(/^ /, '');
    const at = ctx.from + item.insert.length;
    input.setSelectionRange(at, at);
    close();
    input.focus();
  };

  input.addEventListener('input', schedule);
  input.addEventListener('focus', schedule);
  input.addEventListener('click', schedule);
  input.addEventListener('blur', () => setTimeout(close, 150));
  input.addEventListener('keydown', (e) => {
    if (list.hidden) {
      if (e.key === ' ' && e.ctrlKey) {
        e.preventDefault();
        update();
      }
      return;
    }
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const n = items.length;
      active = (active + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
      draw();
    } else if (e.key === 'Enter' && active >= 0) {
      e.preventDefault();
      accept(active);
    } else if (e.key === 'Tab' && items.length) {
      e.preventDefault();
      accept(Math.max(active, 0));
    } else if (e.key === 'Escape') {
      e.preventDefault();
      close();
    }
  });
  list.addEventListener('mousedown', (e) => {
    const li = e.target.closest('li');
    if (!li) return;
    e.preventDefault();
    accept(Number(li.dataset.index));
  });
}
