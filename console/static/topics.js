// The Topics page: a tree browser over the topic tree, fetched lazily one branch at a time,
// with the live values of the topics directly under every open branch (one subscription per
// open branch), the selected topic's specification, properties and live value, and forms to
// add, set, remove and find topics.

import {
  FULL_TEXT, cell, el, field, form, keyValues, on, replace, statusLine, table, valueText,
} from './dom.js';

/** The most topics fetched to list one branch's children. */
export const BRANCH_LIMIT = 1000;
/** The most topics a search lists. */
const FIND_LIMIT = 200;
const TYPES = ['STRING', 'INT64', 'DOUBLE', 'JSON', 'BINARY', 'TIME_SERIES'];

const escapeSegment = (segment) => segment.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
const pattern = (branch) => branch.split('/').map(escapeSegment).join('/');
/** Every topic below a branch ('' is the root). */
export const belowSelector = (branch) => (branch ? `?${pattern(branch)}/` : '?.*//');
/** The topics directly under a branch. */
export const childrenSelector = (branch) => (branch ? `?${pattern(branch)}/.+` : '?.+');

/** Note the first live value the page shows (ms since the page began loading). */
function markFirstLiveValue() {
  const root = document.documentElement;
  if (!root.dataset.firstLiveValue) root.dataset.firstLiveValue = performance.now().toFixed(0);
}

/** A value typed into a form, as the topic type wants it. */
export function parseValue(text, type) {
  switch (type) {
    case 'STRING': return text;
    case 'INT64': {
      const t = text.trim();
      if (!/^[-+]?\d+$/.test(t)) throw Object.assign(new Error(`not an integer: ${JSON.stringify(t)}`), { code: 'INVALID_VALUE' });
      const big = BigInt(t);
      return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
    }
    case 'DOUBLE': {
      const t = text.trim().toLowerCase();
      const spelled = { nan: NaN, inf: Infinity, '+inf': Infinity, '-inf': -Infinity };
      if (t in spelled) return spelled[t];
      const n = Number(t);
      if (t === '' || !Number.isFinite(n)) throw Object.assign(new Error(`not a number: ${JSON.stringify(t)}`), { code: 'INVALID_VALUE' });
      return n;
    }
    case 'JSON':
      try { return JSON.parse(text); } catch (e) { throw Object.assign(new Error(`not JSON: ${e.message}`), { code: 'INVALID_VALUE' }); }
    case 'BINARY':
      try {
        return Uint8Array.from(atob(text.trim()), (c) => c.charCodeAt(0));
      } catch { throw Object.assign(new Error('BINARY values are typed in base64'), { code: 'INVALID_VALUE' }); }
    default:
      throw Object.assign(new Error(`the console does not set ${type} topics (a TIME_SERIES takes appended events)`), { code: 'INVALID_TYPE' });
  }
}

/** One node of the tree: a branch, a topic, or both. */
class TreeNode {
  constructor(page, path, name) {
    this.page = page;
    this.path = path;
    this.name = name;
    this.type = null;
    this.isTopic = false;
    this.hasChildren = false;
    this.expanded = false;
    this.generation = 0;
    this.children = new Map();
    this.subscription = null;
    this.loading = null;
    this.toggle = el('button', { type: 'button', class: 'toggle', 'aria-label': `open ${path}` }, '');
    this.label = el('button', { type: 'button', class: 'name', title: path }, name);
    this.typeNode = el('span', { class: 'type' });
    this.valueNode = el('span', { class: 'value' });
    this.note = el('span', { class: 'note' });
    this.list = el('ul', { class: 'branch' });
    this.li = el('li', { class: 'node', 'data-path': path },
      el('div', { class: 'row' }, this.toggle, this.label, this.typeNode, this.valueNode, this.note), this.list);
    on(this.toggle, 'click', () => (this.expanded ? this.collapse() : this.opened()));
    on(this.label, 'click', () => (this.isTopic ? page.navigateTo(path) : this.expanded ? this.collapse() : this.opened()));
    this.render();
  }

  render() {
    replace(this.toggle, this.hasChildren ? (this.expanded ? '▾' : '▸') : '');
    this.toggle.disabled = !this.hasChildren;
    this.li.classList.toggle('topic', this.isTopic);
    this.li.classList.toggle('selected', this.page.selected === this.path);
    replace(this.typeNode, this.isTopic && this.type ? this.type : '');
    if (!this.isTopic) replace(this.valueNode);
  }

  showValue(value, type) {
    this.type = type;
    replace(this.valueNode, valueText(value, type));
    this.valueNode.dataset.live = 'true';
    if (value !== null && value !== undefined) markFirstLiveValue();
  }

  child(name) {
    let node = this.children.get(name);
    if (!node) {
      node = new TreeNode(this.page, this.path ? `${this.path}/${name}` : name, name);
      this.children.set(name, node);
      const after = [...this.children.keys()].sort().find((n) => n > name);
      this.list.insertBefore(node.li, after === undefined ? null : this.children.get(after).li);
    }
    return node;
  }

  /** The name of the child `path` lies in, or null; `direct` when it is that child itself. */
  childOf(path) {
    const prefix = this.path ? `${this.path}/` : '';
    if (!path.startsWith(prefix) || path.length === prefix.length) return null;
    const rest = path.slice(prefix.length);
    const at = rest.indexOf('/');
    return at < 0 ? { name: rest, direct: true } : { name: rest.slice(0, at), direct: false };
  }

  /** Open this branch (once): resolves when its children are listed and subscribed. */
  opened() {
    if (!this.expanded) this.loading = this.expand();
    return this.loading;
  }

  async expand() {
    const session = this.page.session;
    const generation = ++this.generation;
    this.expanded = true;
    this.render();
    replace(this.note, 'loading…');
    try {
      const rows = await session.topics.fetch(belowSelector(this.path), { withValues: false, limit: BRANCH_LIMIT });
      if (generation !== this.generation) return;
      for (const row of rows) {
        const where = this.childOf(row.path);
        if (!where) continue;
        const node = this.child(where.name);
        if (where.direct) { node.isTopic = true; node.type = row.type; } else node.hasChildren = true;
        node.render();
      }
      replace(this.note, rows.length >= BRANCH_LIMIT ? `showing what the first ${BRANCH_LIMIT} topics below hold` : '');
      this.subscription = await session.topics.subscribe(childrenSelector(this.path), (event) => this.heard(event));
      if (generation !== this.generation) this.unsubscribe();
    } catch (e) {
      if (generation === this.generation) replace(this.note, `${e.code ?? 'ERROR'}: ${e.message}`);
    }
  }

  heard(event) {
    if (!this.expanded || !event.path) return;
    const where = this.childOf(event.path);
    if (!where || !where.direct) return;
    if (event.kind === 'subscribed' || event.kind === 'value') {
      const node = this.child(where.name);
      node.isTopic = true;
      node.showValue(event.value, event.type);
      node.render();
    } else if (event.kind === 'unsubscribed') {
      const node = this.children.get(where.name);
      if (!node) return;
      node.isTopic = false;
      if (!node.hasChildren) { node.dispose(); node.li.remove(); this.children.delete(where.name); } else node.render();
    }
  }

  unsubscribe() {
    const sub = this.subscription;
    this.subscription = null;
    if (sub) sub.unsubscribe().catch(() => {});
  }

  collapse() {
    this.generation += 1;
    this.expanded = false;
    this.loading = null;
    this.unsubscribe();
    for (const node of this.children.values()) node.dispose();
    this.children.clear();
    replace(this.list);
    replace(this.note);
    this.render();
  }

  dispose() {
    this.generation += 1;
    this.unsubscribe();
    for (const node of this.children.values()) node.dispose();
  }

  /** The open branches below and at this node, deepest last. */
  openPaths(out = []) {
    if (this.expanded) out.push(this.path);
    for (const node of this.children.values()) node.openPaths(out);
    return out;
  }
}

export function topicsPage(ctx) {
  return new TopicsPage(ctx);
}

class TopicsPage {
  constructor(ctx) {
    this.ctx = ctx;
    this.session = ctx.session;
    this.selected = null;
    this.shown = null;
    this.selection = null;
    this.root = new TreeNode(this, '', '');
    this.root.li.classList.add('root');
    this.root.hasChildren = true;
    this.detail = el('section', { id: 'topic-detail', class: 'panel' }, el('p', { class: 'hint' }, 'Select a topic.'));
    const refresh = on(el('button', { type: 'button', id: 'tree-refresh' }, 'Refresh'), 'click', () => this.refresh());
    this.node = el('div', { class: 'columns' },
      el('section', { class: 'panel tree', id: 'topic-tree' },
        el('div', { class: 'toolbar' }, el('h2', {}, 'Topic tree'), refresh),
        el('ul', { class: 'branch' }, this.root.li)),
      el('div', { class: 'stack' }, this.detail, this.forms()));
    this.started = false;
  }

  show(arg) {
    if (!this.started) { this.started = true; this.root.opened(); }
    if (arg && arg !== this.shown) this.reveal(arg);
  }

  navigateTo(path) { this.ctx.navigate('topics', path); }

  async refresh() {
    const open = this.root.openPaths();
    this.root.collapse();
    for (const path of open) await this.open(path);
  }

  /** Open the branches down to and including `path` ('' is the root); the node, or null. */
  async open(path) {
    let node = this.root;
    await node.opened();
    for (const segment of path ? path.split('/') : []) {
      let child = node.children.get(segment);
      if (!child) { // listed before it was there: list the branch again
        node.collapse();
        await node.opened();
        child = node.children.get(segment);
        if (!child) return null;
      }
      node = child;
      if (node.hasChildren) await node.opened();
    }
    return node;
  }

  /** Open the tree down to `path`, and select it unless it is only a branch. */
  async reveal(path) {
    this.shown = path;
    const node = await this.open(path);
    if (this.shown !== path) return;
    if (!node || node.isTopic) this.select(path);
    node?.label.scrollIntoView({ block: 'nearest' });
  }

  select(path) {
    const previous = this.selection;
    if (previous) previous.unsubscribe().catch(() => {});
    this.selection = null;
    this.selected = path;
    this.forEachNode((n) => n.render());
    const value = el('pre', { id: 'topic-value', class: 'value', 'data-path': path }, '');
    const type = el('dd', { id: 'topic-type' }, '…');
    const updates = el('dd', { id: 'topic-updates' }, '0');
    const state = el('dd', { id: 'topic-state' }, 'subscribing…');
    const properties = el('div', { id: 'topic-properties' });
    replace(this.detail,
      el('h2', {}, 'Topic ', el('code', {}, path)),
      el('dl', { class: 'facts' }, el('dt', {}, 'type'), type, el('dt', {}, 'state'), state,
        el('dt', {}, 'updates seen'), updates),
      el('h3', {}, 'Value'), value,
      el('h3', {}, 'Properties'), properties);
    let count = 0;
    const heard = (event) => {
      if (this.selected !== path || event.path !== path) return;
      if (event.kind === 'subscribed' || event.kind === 'value') {
        replace(type, event.type);
        replace(value, valueText(event.value, event.type, FULL_TEXT));
        value.dataset.live = 'true';
        if (event.value !== null && event.value !== undefined) markFirstLiveValue();
        replace(state, event.retained === false ? 'live (last value not retained)' : 'live');
        if (event.kind === 'value') replace(updates, String(++count));
        if (event.kind === 'subscribed') {
          const props = Object.entries(event.specification?.properties ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
          replace(properties, props.length ? table(['property', 'value'], props) : el('p', { class: 'hint' }, 'none'));
        }
      } else if (event.kind === 'unsubscribed') {
        replace(state, `gone (${event.reason ?? 'unsubscribed'})`);
      }
    };
    this.session.topics.subscribe(`>${path}`, heard).then((sub) => {
      if (this.selected === path) { this.selection = sub; if (state.textContent === 'subscribing…') replace(state, 'no such topic (yet): waiting for it'); } else sub.unsubscribe().catch(() => {});
    }, (e) => replace(state, `${e.code ?? 'ERROR'}: ${e.message}`));
    for (const input of this.pathInputs) input.value = path;
  }

  forEachNode(fn, node = this.root) {
    fn(node);
    for (const child of node.children.values()) this.forEachNode(fn, child);
  }

  forms() {
    const s = this.session;
    const typeSelect = (id, first) => el('select', { id }, first ? el('option', { value: '' }, first) : null,
      TYPES.map((t) => el('option', { value: t }, t)));

    const addPath = el('input', { id: 'add-path', required: true, maxlength: 1024, spellcheck: 'false' });
    const addType = typeSelect('add-type');
    const addProps = el('textarea', { id: 'add-properties', rows: 2, placeholder: 'NAME=value, one a line' });
    const addStatus = statusLine({ id: 'add-status' });
    const add = form({ id: 'add-form' }, [
      el('h3', {}, 'Add a topic'), field('Path', addPath), field('Type', addType), field('Properties', addProps),
      el('button', { type: 'submit' }, 'Add')],
    async () => s.topics.add(addPath.value.trim(), addType.value, keyValues(addProps.value)), addStatus);

    const setPath = el('input', { id: 'set-path', required: true, maxlength: 1024, spellcheck: 'false' });
    const setValue = el('textarea', { id: 'set-value', rows: 2, spellcheck: 'false' });
    const setType = typeSelect('set-type', "the topic's type");
    const addIfMissing = el('input', { id: 'set-add', type: 'checkbox' });
    const setStatus = statusLine({ id: 'set-status' });
    const set = form({ id: 'set-form' }, [
      el('h3', {}, 'Set a value'), field('Path', setPath), field('Value', setValue), field('Type', setType),
      el('label', { class: 'check' }, addIfMissing, ' add the topic if missing (needs a type)'),
      el('button', { type: 'submit' }, 'Set')],
    async () => {
      const path = setPath.value.trim();
      let type = setType.value;
      if (!type) {
        const [found] = await s.topics.fetch(`>${path}`, { withValues: false });
        if (!found) throw Object.assign(new Error(`no topic at ${path}: choose a type to add it`), { code: 'NO_SUCH_TOPIC' });
        type = found.type;
      }
      await s.topics.set(path, parseValue(setValue.value, type), { type, addIfMissing: addIfMissing.checked });
      return `set ${path}`;
    }, setStatus);

    const removeSelector = el('input', { id: 'remove-selector', required: true, maxlength: 4096, spellcheck: 'false' });
    const removeStatus = statusLine({ id: 'remove-status' });
    const remove = form({ id: 'remove-form' }, [
      el('h3', {}, 'Remove topics'), field('Selector', removeSelector), el('button', { type: 'submit' }, 'Remove')],
    async () => {
      const selector = removeSelector.value.trim();
      const removed = await s.topics.remove(selector.startsWith('>') || selector.startsWith('?') || selector.startsWith('*')
        || selector.startsWith('#') ? selector : `>${selector}`);
      return `removed ${removed} topic${removed === 1 ? '' : 's'}`;
    }, removeStatus);

    const findSelector = el('input', { id: 'find-selector', required: true, maxlength: 4096, spellcheck: 'false', placeholder: '?sensors/.*//' });
    const found = el('div', { id: 'find-results' });
    const findStatus = statusLine({ id: 'find-status' });
    const find = form({ id: 'find-form' }, [
      el('h3', {}, 'Find topics'), field('Selector', findSelector), el('button', { type: 'submit' }, 'Fetch'), found],
    async () => {
      const rows = await s.topics.fetch(findSelector.value.trim(), { withValues: true, limit: FIND_LIMIT });
      replace(found, table(['path', 'type', 'value'], rows.map((r) => [
        el('td', {}, on(el('button', { type: 'button', class: 'link' }, r.path), 'click', () => this.navigateTo(r.path))),
        r.type, { text: valueText(r.value, r.type), class: 'value' }].map(cell))));
      return rows.length >= FIND_LIMIT ? `the first ${FIND_LIMIT} topics` : `${rows.length} topic${rows.length === 1 ? '' : 's'}`;
    }, findStatus);

    this.pathInputs = [setPath, removeSelector];
    return el('section', { class: 'panel forms grid' }, add, set, remove, find);
  }

  reconnected() {
    // a new session: the subscriptions were made again by the client; the tree may be stale
    this.refresh();
  }

  dispose() {
    this.root.dispose();
    this.selection?.unsubscribe().catch(() => {});
  }
}

