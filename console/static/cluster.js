// The Cluster page: nodes, partitions (primary, backup, epoch, journal position, replication
// lag), gateways and services, from `cluster_status` every 2 s, and charts of updates/s and
// sessions over the last minutes. The rates are computed here from successive polls: updates/s
// is the growth of the partitions' journal positions (every retained update is one journal
// record) over the time between two answers.

import { cell, el, errorText, flag, json, replace, table } from './dom.js';
import { lineChart } from './chart.js';

export const POLL_MS = 2000;
/** How far back the charts go. */
export const HISTORY_MS = 10 * 60 * 1000;
/** The shortest span a chart shows (it widens to HISTORY_MS as the figures pile up). */
const MIN_SPAN_MS = 2 * 60 * 1000;

/** Updates/s between two cluster_status answers taken `seconds` apart, or null. */
export function updateRate(before, after, seconds) {
  if (!before || !after || !(seconds > 0)) return null;
  const old = new Map(before.partitions.map((p) => [p.partition, p.sequence]));
  let grown = 0;
  let known = 0;
  for (const p of after.partitions) {
    const was = old.get(p.partition);
    if (typeof was !== 'number' || typeof p.sequence !== 'number') continue;
    grown += Math.max(0, p.sequence - was);
    known += 1;
  }
  return known ? grown / seconds : null;
}

/** Sessions open on every gateway that answered. */
export function sessionCount(status) {
  const counts = status.gateways.map((g) => g.sessions).filter((n) => typeof n === 'number');
  return counts.length ? counts.reduce((a, b) => a + b, 0) : null;
}

/** Polls cluster_status while the console is logged in; keeps the figures the charts draw. */
export class ClusterPoller {
  constructor(session) {
    this.session = session;
    this.latest = null;
    this.error = null;
    this.history = []; // {t, updates, sessions}
    this.listeners = new Set();
    this.timer = null;
    this.running = false;
    this.previous = null; // {t, status}
  }

  start() {
    this.running = true;
    this.poll();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }

  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  async poll() {
    if (!this.running) return;
    const started = performance.now();
    try {
      const status = await this.session.server.clusterStatus();
      const t = Date.now();
      const seconds = this.previous ? (t - this.previous.t) / 1000 : 0;
      this.history.push({ t, updates: updateRate(this.previous?.status, status, seconds), sessions: sessionCount(status) });
      while (this.history.length && this.history[0].t < t - HISTORY_MS) this.history.shift();
      this.previous = { t, status };
      this.latest = status;
      this.error = null;
    } catch (e) {
      this.error = e;
      this.history.push({ t: Date.now(), updates: null, sessions: null });
    }
    for (const fn of this.listeners) fn(this);
    if (!this.running) return;
    // without VIEW_SERVER there is nothing to poll for: ask again rarely
    const wait = this.error?.code === 'PERMISSION_DENIED' ? 30000 : Math.max(0, POLL_MS - (performance.now() - started));
    this.timer = setTimeout(() => this.poll(), wait);
  }
}

const dash = (v) => (v === null || v === undefined ? '—' : typeof v === 'object' ? json(v) : String(v));

function render(status) {
  const alive = new Map(status.nodes.map((n) => [n.name, n.alive]));
  const nodeCell = (name) => (name ? { text: name, class: alive.get(name) === false ? 'bad' : '' } : '—');
  return [
    el('p', { id: 'cluster-summary' },
      `Namespace ${status.namespace}. Healthy: `, el('strong', { class: status.healthy ? 'good' : 'bad', id: 'cluster-healthy' }, status.healthy ? 'yes' : 'no'),
      `. Balanced: ${status.balanced ? 'yes' : 'no'}. Security version ${dash(status.configuration?.security_version)}; `
      + `configuration log term ${dash(status.configuration?.log_term)}, committed ${dash(status.configuration?.log_committed)}, `
      + `${dash(status.configuration?.log_copies)} copies (majority ${dash(status.configuration?.log_majority)}).`),
    el('h3', {}, 'Nodes'),
    table(['node', 'address', 'alive', 'controller'], status.nodes.map((n) => el('tr', { 'data-node': n.name, 'data-alive': String(n.alive) },
      [n.name, n.address, flag(n.alive), n.home ? 'here' : ''].map(cell))), { id: 'cluster-nodes' }),
    el('h3', {}, 'Partitions'),
    table(['partition', 'primary', 'backup', 'epoch', 'topics', 'journal position', 'backup position', 'lag', 'caught up', 'healthy'],
      status.partitions.map((p) => el('tr', {
        'data-partition': String(p.partition), 'data-primary': p.primary ?? '', 'data-epoch': String(p.epoch),
        'data-sequence': p.sequence ?? '',
      },
        [String(p.partition), nodeCell(p.primary), nodeCell(p.backup), dash(p.epoch), dash(p.topics), dash(p.sequence),
          dash(p.backup_sequence), dash(p.lag), p.backup ? flag(p.caught_up) : '—', flag(p.healthy)].map(cell))),
      { id: 'cluster-partitions' }),
    el('h3', {}, 'Gateways'),
    table(['gateway', 'node', 'URL', 'answering', 'sessions', 'connections', 'MQTT', 'MQTT connections'],
      status.gateways.map((g) => [g.gateway, nodeCell(g.node), dash(g.url), g.lost ? { text: 'lost', class: 'bad' } : flag(g.answering),
        dash(g.sessions), dash(g.connections), dash(g.mqtt), dash(g.mqtt_connections)]),
      { id: 'cluster-gateways' }),
    el('h3', {}, 'Services'),
    table(['service', 'node'], Object.entries(status.services ?? {}).map(([name, node]) => [name, nodeCell(node)]),
      { id: 'cluster-services' }),
  ];
}

export function clusterPage(ctx) {
  const poller = ctx.poller;
  const charts = el('div', { class: 'charts', id: 'cluster-charts' });
  const body = el('div', { id: 'cluster-body' }, el('p', { class: 'hint' }, 'Asking the cluster…'));
  const updated = el('p', { class: 'status', id: 'cluster-updated' });
  const node = el('section', { class: 'panel wide' }, el('h2', {}, 'Cluster'), updated, charts, body);
  let shown = false;

  const draw = () => {
    if (!shown) return;
    const now = Date.now();
    const first = poller.history.length ? poller.history[0].t : now;
    const spanMs = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, Math.ceil((now - first) / 60000) * 60000));
    replace(charts,
      lineChart({ title: 'updates/s', id: 'chart-updates', now, spanMs, points: poller.history.map((h) => ({ t: h.t, v: h.updates })) }),
      lineChart({ title: 'sessions', id: 'chart-sessions', now, spanMs, points: poller.history.map((h) => ({ t: h.t, v: h.sessions })) }));
    if (poller.error) {
      updated.dataset.state = 'error';
      replace(updated, `cluster_status failed: ${errorText(poller.error)}`);
    } else if (poller.latest) {
      updated.dataset.state = 'ok';
      replace(updated, `as of ${new Date().toLocaleTimeString()} (every ${POLL_MS / 1000} s)`);
      replace(body, render(poller.latest));
    }
  };
  const off = poller.subscribe(draw);
  return {
    node,
    show: () => { shown = true; draw(); },
    hide: () => { shown = false; },
    dispose: off,
  };
}
