// The console's read-mostly pages: session trees, security, sessions (with closing one), fan-out
// and remote servers, missing-topic handlers. Each loads what it shows when it is opened and on
// Refresh; the sessions page refreshes while it is open.

import { cell, el, field, on, replace, statusLine, table } from './dom.js';

const SESSIONS_REFRESH_MS = 5000;
/** The most sessions listed (a narrower filter shows others). */
const SESSION_ROWS = 500;
/** Properties shown in columns of their own on the sessions page; the others go under "other". */
const SESSION_COLUMNS = ['$Principal', '$Transport', '$ClientIP', '$Roles', '$StartTime'];

/** A page that loads `load()` into its body on show and on Refresh (and every `every` ms while shown). */
function loadingPage(title, id, load, { every = 0, extra = null } = {}) {
  const body = el('div', { id: `${id}-body` });
  const status = statusLine({ id: `${id}-status` });
  let timer = null;
  let shown = false;
  const refresh = async () => {
    try {
      replace(body, await load());
      status.clear();
    } catch (e) {
      status.fail(e);
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    if (shown && every) timer = setTimeout(async () => { await refresh(); schedule(); }, every);
  };
  const node = el('section', { class: 'panel wide' },
    el('div', { class: 'toolbar' }, el('h2', {}, title), on(el('button', { type: 'button' }, 'Refresh'), 'click', refresh)),
    extra, status.node, body);
  return {
    node,
    refresh,
    show: () => { shown = true; refresh(); schedule(); },
    hide: () => { shown = false; clearTimeout(timer); },
    dispose: () => { shown = false; clearTimeout(timer); },
    reconnected: refresh,
  };
}

const none = (text) => el('p', { class: 'hint' }, text);
const startTime = (ms) => (/^\d+$/.test(ms ?? '') ? new Date(Number(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC') : ms ?? '');
const list = (items) => (items && items.length ? items.join(', ') : '—');

export function treesPage(ctx) {
  return loadingPage('Session trees: branch mapping tables', 'trees', async () => {
    const tables = await ctx.session.sessionTrees.listTables();
    const branches = Object.keys(tables ?? {}).sort();
    if (!branches.length) return none('No branch mapping tables.');
    return branches.map((branch) => el('div', { class: 'block', 'data-branch': branch },
      el('h3', {}, 'Session tree branch ', el('code', {}, branch)),
      table(['session filter', 'topic tree branch'], tables[branch].map(([filter, target]) => [filter, target]))));
  });
}

export function securityPage(ctx) {
  return loadingPage('Security', 'security', async () => {
    const store = await ctx.session.security.get();
    const anonymous = store.anonymous ?? {};
    const roles = Object.entries(store.roles ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
    const principals = Object.entries(store.principals ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
    return [
      el('p', {}, `Version ${store.version}. Anonymous sessions: `,
        el('strong', { id: 'security-anonymous' }, anonymous.allowed ? `allowed, with roles ${list(anonymous.roles)}` : 'refused'), '.'),
      el('h3', {}, 'Roles'),
      table(['role', 'global permissions', 'default path permissions', 'path permissions', 'includes'],
        roles.map(([name, role]) => [
          name, list(role.global), list(role.default),
          Object.entries(role.paths ?? {}).map(([path, perms]) => `${path}: ${perms.length ? perms.join(', ') : 'none'}`).join('; ') || '—',
          list(role.includes)]), { id: 'security-roles' }),
      el('h3', {}, 'Principals'),
      table(['principal', 'roles'], principals.map(([name, p]) => [name, list(p.roles)]), { id: 'security-principals' }),
    ];
  });
}

export function sessionsPage(ctx) {
  const s = ctx.session;
  const filter = el('input', { id: 'sessions-filter', value: 'all', maxlength: 4096, spellcheck: 'false' });
  const outcome = statusLine({ id: 'sessions-outcome' });
  let page = null;
  const filterForm = el('form', { id: 'sessions-filter-form', class: 'inline', novalidate: true },
    field('Session filter', filter), el('button', { type: 'submit' }, 'Show'), outcome.node);
  on(filterForm, 'submit', (event) => { event.preventDefault(); page.refresh(); });

  async function close(sessionId) {
    try {
      const closed = await s.sessions.close({ sessionId });
      outcome.ok(closed ? `closed session ${sessionId}` : `session ${sessionId} was gone already`);
    } catch (e) {
      outcome.fail(e);
    }
    page.refresh();
  }

  page = loadingPage('Sessions', 'sessions', async () => {
    const found = await s.sessions.getProperties({ filter: filter.value.trim() || 'all' });
    const all = Object.keys(found ?? {}).sort();
    if (!all.length) return none('No session matches.');
    const ids = all.slice(0, SESSION_ROWS);
    const more = all.length > ids.length ? none(`The first ${SESSION_ROWS} of ${all.length} sessions: narrow the filter for the others.`) : null;
    return [more, table(['session', ...SESSION_COLUMNS.map((c) => c.slice(1)), 'other properties', ''],
      ids.map((sid) => {
        const props = found[sid];
        const own = sid === s.sessionId;
        const other = Object.entries(props).filter(([k]) => !SESSION_COLUMNS.includes(k)).sort(([a], [b]) => (a < b ? -1 : 1));
        return el('tr', { 'data-session': sid, class: own ? 'own' : null },
          cell(own ? `${sid} (this console)` : sid),
          SESSION_COLUMNS.map((k) => cell(k === '$StartTime' ? startTime(props[k]) : props[k] ?? '')),
          cell(other.map(([k, v]) => `${k}=${v}`).join('  ')),
          el('td', {}, on(el('button', { type: 'button', class: 'danger', 'data-close': sid, disabled: own }, 'Close'),
            'click', () => close(sid))));
      }), { id: 'sessions-table' })];
  }, { every: SESSIONS_REFRESH_MS, extra: filterForm });
  return page;
}

export function fanoutPage(ctx) {
  return loadingPage('Fan-out and remote servers', 'fanout', async () => {
    const [connections, servers] = await Promise.all([ctx.session.fanout.list(), ctx.session.remoteServers.list()]);
    const ms = (v) => (v === null || v === undefined ? '—' : `${v} ms`);
    return [
      el('h3', {}, 'Fan-out connections (this server mirrors a primary)'),
      connections.length ? table(
        ['connection', 'primaries', 'state', 'lag', 'round trip', 'last update', 'links (selector: topics, updates)', 'error'],
        connections.map((c) => [
          c.name, list(c.primaries), { text: c.state, class: c.state === 'connected' ? 'good' : 'bad' },
          ms(c.lag_ms), ms(c.rtt_ms), c.last_update_s === null || c.last_update_s === undefined ? '—' : `${c.last_update_s} s ago`,
          (c.links ?? []).map((l) => `${l.selector}: ${l.topics}, ${l.updates}${l.contested?.length ? ` (${l.contested.length} contested)` : ''}`).join('; '),
          c.error ?? '']), { id: 'fanout-connections' }) : none('No fan-out connections.'),
      el('h3', {}, 'Remote servers (for remote topic views)'),
      servers.length ? table(['server', 'URLs', 'principal', 'state', 'views', 'error'],
        servers.map((r) => [r.name, list(r.urls), r.principal ?? '', { text: r.state, class: r.state === 'connected' ? 'good' : 'unknown' },
          list(r.views), r.error ?? '']), { id: 'remote-servers' }) : none('No remote servers.'),
    ];
  });
}

export function handlersPage(ctx) {
  return loadingPage('Missing-topic handlers', 'handlers', async () => {
    const handlers = await ctx.session.missingTopics.list();
    if (!handlers.length) return none('No missing-topic handlers are registered.');
    return table(['path', 'session', 'registration'],
      handlers.map(([registration, path, sessionId]) => [path, sessionId, registration]), { id: 'handlers-table' });
  });
}

