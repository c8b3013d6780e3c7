// bench/broker.py's workload with canopy's JavaScript client (clients/js) under Node: one publisher,
// TOPICS topics in round robin (~50-byte payloads), SUBSCRIBERS sessions subscribed to all of them,
// all in this process; the same phases and rules as bench/peers.py (warm-up, a throughput window,
// then latency at a fixed rate, then a drain). Prints one JSON object: the raw measurement.
//
//   node bench/js_client.mjs URL PRINCIPAL PASSWORD DURATION SUBSCRIBERS TOPICS RATE
import { connect } from '../clients/js/src/index.js';

const [url, principal, password, durationS, subscribers, topics, rate] = process.argv.slice(2);
const DURATION = Number(durationS) * 1e9;
const SUBS = Number(subscribers);
const TOPICS = Number(topics);
const RATE = Number(rate);
const WINDOW = 2000; // outstanding sets, as the Python publisher keeps
const WARMUP = 1e9;
const LATENCY_WARMUP = 0.5e9;
const BATCH = 100;
const TICK = 1e6;
const now = () => Number(process.hrtime.bigint());
const encoder = new TextEncoder();
const payload = (seq, ns) => encoder.encode(`{"ts":"${String(ns).padStart(19, '0')}","seq":${seq},"pad":"xxxx"}`);
const sentNs = (bytes) => Number(new TextDecoder().decode(bytes.subarray(7, 26)));
const yieldNow = () => new Promise((r) => { setImmediate(r); });
const sleep = (ms) => new Promise((r) => { setTimeout(r, ms); });

const phase = { start: 0, end: 0, latency: false };
const tallies = Array.from({ length: SUBS }, () => ({ received: 0, inWindow: 0, latencies: [] }));
const paths = Array.from({ length: TOPICS }, (_, i) => `benchjs/t${i}`);
const publisher = await connect(url, { principal, password });
for (const p of paths) await publisher.topics.add(p, 'BINARY', { CONFLATION: 'off' });
const sessions = [publisher];
for (const tally of tallies) {
  const s = await connect(url);
  sessions.push(s);
  await s.topics.subscribe('?benchjs/', (e) => {
    if (e.kind !== 'value') return;
    const t = now();
    tally.received += 1;
    if (t >= phase.start && t < phase.end) tally.inWindow += 1;
    if (phase.latency) {
      const sent = sentNs(e.value);
      if (sent >= phase.start && sent < phase.end) tally.latencies.push(t - sent);
    }
  });
}

let outstanding = [];
async function publish(topic, data) {
  outstanding.push(publisher.topics.set(paths[topic], data));
  if (outstanding.length >= WINDOW) {
    const batch = outstanding;
    outstanding = [];
    await Promise.all(batch);
  }
}
async function flush() {
  const batch = outstanding;
  outstanding = [];
  await Promise.all(batch);
}
const received = () => tallies.reduce((n, t) => n + t.received, 0);
async function drain(expected) {
  const deadline = now() + 15e9;
  let last = received();
  let since = now();
  while (received() < expected && now() < deadline) {
    await sleep(10);
    if (received() !== last) { last = received(); since = now(); } else if (now() - since > 0.5e9) break;
  }
  return received();
}
function start(warmup, latency) {
  for (const t of tallies) { t.received = 0; t.inWindow = 0; t.latencies = []; }
  phase.start = now() + warmup;
  phase.end = phase.start + DURATION;
  phase.latency = latency;
}

const m = {};
start(WARMUP, false);
let seq = 0;
let inWindow = 0;
for (;;) {
  const t = now();
  if (t >= phase.end) break;
  for (let i = 0; i < BATCH; i++) { await publish(seq % TOPICS, payload(seq, now())); seq += 1; }
  if (t >= phase.start) inWindow += BATCH;
  await yieldNow();
}
await flush();
m.published_per_s = inWindow / (DURATION / 1e9);
m.delivered_per_s = tallies.reduce((n, x) => n + x.inWindow, 0) / (DURATION / 1e9);
m.throughput_published = seq;
m.throughput_expected = seq * SUBS;
m.throughput_received = await drain(m.throughput_expected);

start(LATENCY_WARMUP, true);
const origin = now();
let sent = 0;
let latencyInWindow = 0;
for (let tick = 1; ; tick++) {
  const t = now();
  if (t >= phase.end) break;
  const due = Math.floor(((t - origin) * RATE) / 1e9);
  while (sent < due) {
    const ts = now();
    await publish(sent % TOPICS, payload(sent, ts));
    if (ts >= phase.start) latencyInWindow += 1;
    sent += 1;
  }
  await sleep(Math.max(0, (origin + tick * TICK - now()) / 1e6));
}
await flush();
m.latency_rate_achieved = latencyInWindow / (DURATION / 1e9);
m.latency_expected = sent * SUBS;
m.latency_received = await drain(m.latency_expected);
m.latencies_ns = tallies.flatMap((t) => t.latencies);
m.subscribers = SUBS;
await Promise.all(sessions.map((s) => s.close()));
process.stdout.write(JSON.stringify(m));
