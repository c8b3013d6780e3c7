// The canopy web console: the shell. It logs in (a canopy session over this origin's
// WebSocket, through the JavaScript client served at /console/client/), shows one page at a time
// (the location's hash names it: #topics, #views, ..., #topics:some/path selects a topic) and
// tells the pages when the session drops, comes back or ends.
//
// Credentials: the principal and password are read from the form, handed to connect() for the
// HELLO and cleared from the form; they go into no URL, cookie or storage. Logging out closes
// the session. The pages act only through the session's requests, which the server authorizes.

import { el, errorText, on, replace } from './dom.js';
import { topicsPage } from './topics.js';
import { viewsPage } from './views.js';
import { fanoutPage, handlersPage, securityPage, sessionsPage, treesPage } from './pages.js';
import { clusterPage, ClusterPoller } from './cluster.js';

const PAGES = [
  ['topics', 'Topics', topicsPage],
  ['views', 'Views', viewsPage],
  ['trees', 'Session trees', treesPage],
  ['security', 'Security', securityPage],
  ['sessions', 'Sessions', sessionsPage],
  ['cluster', 'Cluster', clusterPage],
  ['fanout', 'Fan-out', fanoutPage],
  ['handlers', 'Missing-topic handlers', handlersPage],
];
const DEFAULT_PAGE = 'topics';

const $ = (id) => document.getElementById(id);

/** The WebSocket URL of the gateway that served this page. */
function gatewayURL() {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/`;
}

/** The page and its argument the hash names (`#topics:a/b` -> ['topics', 'a/b']). */
function route() {
  const hash = decodeURIComponent(location.hash.slice(1));
  const at = hash.indexOf(':');
  const name = at < 0 ? hash : hash.slice(0, at);
  const arg = at < 0 ? null : hash.slice(at + 1);
  return PAGES.some(([id]) => id === name) ? [name, arg] : [DEFAULT_PAGE, null];
}

function setConnection(state, text) {
  const node = $('connection');
  node.dataset.state = state;
  replace(node, text);
}

class Console {
  constructor(client) {
    this.client = client;
    this.session = null;
    this.pages = new Map();
    this.current = null;
    this.poller = null;
    this.offs = [];
  }

  async login(principal, password) {
    const session = await this.client.connect(gatewayURL(), {
      principal: principal || null, password: password || null, reconnectTimeout: 60,
    });
    this.session = session;
    this.offs = [
      session.on('disconnected', ({ reason }) => {
        setConnection('reconnecting', `connection lost (${reason ?? 'no reason given'}); reconnecting…`);
        for (const page of this.pages.values()) page.disconnected?.();
      }),
      session.on('reconnected', ({ resumed, sessionId }) => {
        setConnection('connected', resumed ? 'connected (resumed)' : 'connected (a new session)');
        this.showWho();
        if (!resumed) for (const page of this.pages.values()) page.reconnected?.(sessionId);
      }),
      session.on('closed', ({ error }) => this.ended(error)),
    ];
    setConnection('connected', 'connected');
    this.showWho(principal);
    this.poller = new ClusterPoller(session);
    this.poller.start();
    const context = {
      session, client: this.client, poller: this.poller,
      navigate: (page, arg) => { location.hash = arg === null || arg === undefined ? page : `${page}:${arg}`; },
    };
    const tabs = $('tabs');
    replace(tabs);
    for (const [id, title, make] of PAGES) {
      const page = make(context);
      page.node.id = `page-${id}`;
      page.node.hidden = true;
      page.node.classList.add('page');
      this.pages.set(id, page);
      $('pages').appendChild(page.node);
      const tab = el('a', { href: `#${id}`, id: `tab-${id}`, class: 'tab' }, title);
      tabs.appendChild(tab);
    }
    $('login').hidden = true;
    tabs.hidden = false;
    $('logout').hidden = false;
    this.show();
  }

  showWho(principal) {
    if (principal !== undefined) this.principal = principal || 'anonymous';
    replace($('who'), `${this.principal} · session ${this.session?.sessionId ?? ''}`);
  }

  show() {
    if (!this.session) return;
    const [name, arg] = route();
    for (const [id, page] of this.pages) {
      const active = id === name;
      document.getElementById(`tab-${id}`)?.classList.toggle('active', active);
      if (active) {
        page.node.hidden = false;
        if (this.current !== page) this.current?.hide?.();
        this.current = page;
        page.show(arg);
      } else {
        page.node.hidden = true;
      }
    }
  }

  teardown() {
    for (const off of this.offs) off();
    this.offs = [];
    this.poller?.stop();
    this.poller = null;
    for (const page of this.pages.values()) page.dispose?.();
    this.pages.clear();
    this.current = null;
    replace($('pages'));
    replace($('tabs'));
    replace($('who'));
    $('tabs').hidden = true;
    $('logout').hidden = true;
    $('login').hidden = false;
  }

  async logout() {
    const session = this.session;
    this.session = null;
    this.teardown();
    setConnection('logged-out', 'logged out');
    if (session) await session.close().catch(() => {});
  }

  ended(error) {
    if (!this.session) return; // logged out: nothing to say
    this.session = null;
    this.teardown();
    setConnection('closed', `the session ended: ${error ? errorText(error) : 'closed'}`);
  }
}

async function main() {
  const status = $('login-status');
  const fail = (text) => { status.dataset.state = 'error'; replace(status, text); };
  let client;
  try {
    client = await import('./client/index.js');
  } catch (e) {
    fail(`the JavaScript client could not be loaded from /console/client/index.js: ${errorText(e)}`);
    $('login-button').disabled = true;
    return;
  }
  const app = new Console(client);
  on($('login-form'), 'submit', async (event) => {
    event.preventDefault();
    const principal = $('principal').value.trim();
    const passwordField = $('password');
    const password = passwordField.value;
    passwordField.value = ''; // the form does not keep it
    $('login-button').disabled = true;
    status.dataset.state = 'busy';
    replace(status, 'logging in…');
    setConnection('connecting', 'connecting…');
    try {
      await app.login(principal, password);
      status.dataset.state = '';
      replace(status);
    } catch (e) {
      setConnection('logged-out', 'not logged in');
      fail(errorText(e));
    } finally {
      $('login-button').disabled = false;
    }
  });
  on($('logout'), 'click', () => app.logout());
  on(window, 'hashchange', () => app.show());
  document.documentElement.dataset.ready = 'true';
}

main();
