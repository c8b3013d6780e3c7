// The Views page: the topic views in evaluation order (the one created first wins a contested
// path) with their state (`active`, or why not), a form that creates or replaces a view and shows
// the parser's error at its position, and removal.

import { cell, el, errorText, field, on, replace, statusLine, table } from './dom.js';

/** The line and column a view specification error names, if any. */
export function errorPosition(message) {
  const found = /line (\d+), column (\d+)/.exec(message ?? '');
  return found ? { line: Number(found[1]), column: Number(found[2]) } : null;
}

/** The offset of a line and column (both from 1) in `text`. */
function offset(text, { line, column }) {
  const lines = text.split('\n');
  let at = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i += 1) at += lines[i].length + 1;
  return Math.min(text.length, at + Math.max(0, column - 1));
}

/** The branch a specification's `to` template starts with (what to browse for its reference topics). */
export function targetBranch(specification) {
  const found = /\bto\s+([^\s<]+)/.exec(specification);
  return found ? found[1].replace(/\/+$/, '') : null;
}

export function viewsPage(ctx) {
  const s = ctx.session;
  const list = el('div', { id: 'views-list' });
  const listStatus = statusLine({ id: 'views-status' });
  const name = el('input', { id: 'view-name', required: true, maxlength: 256, spellcheck: 'false' });
  const spec = el('textarea', { id: 'view-spec', rows: 6, spellcheck: 'false', maxlength: 65536,
    placeholder: 'map ?sensors/.*// to views/<path(1)>' });
  // the server's message: a first line that says what is wrong where, then the line of the
  // specification with a caret under the place (kept in a <pre>, so that the caret lines up)
  const summary = el('p', { id: 'view-error-summary' });
  const excerpt = el('pre', { id: 'view-error-excerpt' });
  const error = el('div', { id: 'view-error', class: 'error', role: 'alert', hidden: true }, summary, excerpt);
  const created = el('p', { id: 'view-created', class: 'status' });
  const submit = el('button', { type: 'submit', id: 'view-submit' }, 'Create or replace');

  async function refresh() {
    try {
      const views = await s.views.list();
      replace(list, views.length === 0 ? el('p', { class: 'hint' }, 'No topic views.') : table(
        ['#', 'name', 'state', 'principal', 'roles', 'specification', ''],
        views.map((v, i) => el('tr', { 'data-view': v.name },
          cell(String(i + 1)), cell(v.name),
          cell({ text: v.state, class: v.state === 'active' ? 'good' : 'bad' }),
          cell(v.principal), cell([...(v.roles ?? [])].join(', ')),
          el('td', {}, el('pre', { class: 'spec' }, v.specification)),
          el('td', {},
            on(el('button', { type: 'button' }, 'Edit'), 'click', () => {
              name.value = v.name;
              spec.value = v.specification;
              spec.focus();
            }),
            on(el('button', { type: 'button', class: 'danger', 'data-remove': v.name }, 'Remove'), 'click', async () => {
              try {
                await s.views.remove(v.name);
                listStatus.ok(`removed ${v.name}`);
              } catch (e) { listStatus.fail(e); }
              refresh();
            })))),
        { id: 'views-table' }));
    } catch (e) {
      listStatus.fail(e);
    }
  }

  const createForm = el('form', { id: 'view-form', novalidate: true },
    el('h3', {}, 'Create or replace a view'), field('Name', name), field('Specification', spec), submit, error, created);
  on(createForm, 'submit', async (event) => {
    event.preventDefault();
    submit.disabled = true;
    error.hidden = true;
    replace(summary);
    replace(excerpt);
    replace(created);
    try {
      const text = spec.value;
      const view = await s.views.create(name.value.trim(), text);
      const branch = targetBranch(view.specification ?? text);
      replace(created, `${view.name}: precedence ${view.precedence}, ${view.state}. `,
        branch ? el('a', { href: `#topics:${branch}`, id: 'view-browse' }, `Browse its reference topics under ${branch}`) : null);
      created.dataset.state = 'ok';
      refresh();
    } catch (e) {
      const [first, ...rest] = errorText(e).split('\n');
      replace(summary, first);
      replace(excerpt, rest.join('\n'));
      excerpt.hidden = rest.length === 0;
      error.dataset.code = e.code ?? '';
      error.hidden = false;
      const at = errorPosition(e.message);
      if (at) {
        const where = offset(spec.value, at);
        spec.focus();
        spec.setSelectionRange(where, Math.min(spec.value.length, where + 1));
        error.dataset.line = String(at.line);
        error.dataset.column = String(at.column);
      }
    } finally {
      submit.disabled = false;
    }
  });

  const node = el('div', { class: 'columns' },
    el('section', { class: 'panel wide' },
      el('div', { class: 'toolbar' }, el('h2', {}, 'Topic views, in evaluation order'),
        on(el('button', { type: 'button' }, 'Refresh'), 'click', refresh)),
      listStatus.node, list),
    el('section', { class: 'panel forms' }, createForm));
  return { node, show: refresh, reconnected: refresh };
}
