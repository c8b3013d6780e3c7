// Small DOM helpers for the console. Every piece of data reaches the page as a text node
// (textContent / createTextNode): nothing here parses HTML, so nothing the server or another
// client sent can become markup or script. The Content-Security-Policy forbids inline script and
// style as a second line.

/** The most characters of one value shown in a table cell (the detail panel shows more). */
export const CELL_TEXT = 200;
/** The most characters of one value shown anywhere. */
export const FULL_TEXT = 65536;

/**
 * An element: `el('td', {class: 'num', title: 'x'}, 'text', child, ...)`. Attributes are set
 * with setAttribute (never `on*` handlers: use `on`); children are nodes or text.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on')) throw new Error(`el: event handlers go through on(), not ${name}`);
    node.setAttribute(name, value === true ? '' : String(value));
  }
  append(node, ...children);
  return node;
}

/** Append children: nodes as they are, anything else as a text node. */
export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace every child of `node`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, ...children);
}

/** Listen; returns the node for chaining. */
export function on(node, event, handler) {
  node.addEventListener(event, handler);
  return node;
}

/** Shorten text for a cell. */
export function clip(text, most = CELL_TEXT) {
  const s = String(text);
  return s.length > most ? `${s.slice(0, most)}… (${s.length.toLocaleString()} characters)` : s;
}

/** JSON text of any value the client hands out (BigInt and Uint8Array included). */
export function json(value, indent = 0) {
  return JSON.stringify(value, (_, v) => {
    if (typeof v === 'bigint') return v.toString();
    if (v instanceof Uint8Array) return `<${v.length} bytes>`;
    return v;
  }, indent) ?? String(value);
}

function hex(bytes, most) {
  const shown = Array.from(bytes.subarray(0, most), (b) => b.toString(16).padStart(2, '0')).join(' ');
  return bytes.length > most ? `${shown} … (${bytes.length.toLocaleString()} bytes)` : shown;
}

/** A topic value as text: by type; `null` is "no value". */
export function valueText(value, type, most = CELL_TEXT) {
  if (value === null || value === undefined) return '';
  if (value instanceof Uint8Array) return hex(value, Math.max(8, Math.floor(most / 3)));
  if (type === 'JSON') return clip(json(value, most > CELL_TEXT ? 2 : 0), most);
  if (typeof value === 'object') return clip(json(value), most);
  return clip(String(value), most);
}

/** A table with a header row; `rows` are arrays of cells (nodes or text). */
export function table(headers, rows, attrs = {}) {
  return el('table', attrs,
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, rows.map((cells) => (cells instanceof Node ? cells : el('tr', {}, cells.map(cell))))));
}

/** A table cell: a node or text; `{text, class, title}` for more. */
export function cell(content) {
  if (content instanceof Node) return content.tagName === 'TD' ? content : el('td', {}, content);
  if (content !== null && typeof content === 'object' && !Array.isArray(content) && 'text' in content) {
    return el('td', { class: content.class, title: content.title }, content.text);
  }
  return el('td', {}, content === null || content === undefined ? '' : String(content));
}

/** "yes"/"no" with a class for colour. */
export function flag(value, good = true) {
  if (value === null || value === undefined) return { text: '?', class: 'unknown' };
  return { text: value ? 'yes' : 'no', class: value === good ? 'good' : 'bad' };
}

/** A line that says what went wrong: the error's code and message. */
export function errorText(e) {
  if (e && typeof e === 'object' && 'code' in e) return `${e.code}: ${e.message}`;
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/**
 * A status line for a form: `status.ok('done')`, `status.fail(error)`, `status.busy()`.
 * The node carries data-state (ok | error | busy) for styling and for tests.
 */
export function statusLine(attrs = {}) {
  const node = el('p', { class: 'status', role: 'status', ...attrs });
  const set = (state, text) => { node.dataset.state = state; replace(node, text); };
  return {
    node,
    ok: (text) => set('ok', text),
    fail: (e) => set('error', errorText(e)),
    busy: (text = 'working…') => set('busy', text),
    clear: () => set('', ''),
  };
}

/** A labelled form field. */
export function field(label, input) {
  return el('label', { class: 'field' }, el('span', {}, label), input);
}

/**
 * A form whose submit runs `action(form)` (never navigates: the CSP's form-action 'none' would
 * refuse it anyway); the submit button is disabled while the action runs, and the status line
 * shows its outcome.
 */
export function form(attrs, children, action, status) {
  const node = el('form', { novalidate: true, ...attrs }, ...children, status.node);
  on(node, 'submit', async (event) => {
    event.preventDefault();
    const buttons = node.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    status.busy();
    try {
      const done = await action(node);
      status.ok(done ?? 'done');
    } catch (e) {
      status.fail(e);
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
  return node;
}

/** Read `KEY=VALUE` lines (blank lines skipped) into an object; bad lines throw. */
export function keyValues(text, what = 'properties') {
  const out = {};
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf('=');
    if (at <= 0) throw Object.assign(new Error(`${what}, line ${i + 1}: expected KEY=VALUE`), { code: 'INVALID_INPUT' });
    out[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return out;
}
