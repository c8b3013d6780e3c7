// A reconnection across a gateway restart loses nothing, by the checker's rules (tests/checking.py):
// no topic ends below its last acknowledged write, no subscriber sees a value nobody sent or a
// topic's values go backwards, and every subscriber ends with every topic's final value.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, ConnectionInterruptedError } from '../src/index.js';
import { ADMIN, URL, python, skip, unique, until } from './server.js';

const SERVE_PID = process.env.CANOPY_SERVE_PID;
const TOPICS = 4;
const sessions = [];
after(() => Promise.all(sessions.map((s) => s.close())));

test('a gateway restart loses nothing acknowledged', { skip: skip || (!SERVE_PID && 'CANOPY_SERVE_PID is not set') }, async () => {
  const options = { ...ADMIN, reconnectTimeout: 90, retryDelay: 0.2 };
  const writer = await connect(URL, options);
  const reader = await connect(URL, options);
  sessions.push(writer, reader);
  const p = unique('restart');
  const paths = Array.from({ length: TOPICS }, (_, i) => `${p}/t${i}`);
  const acknowledged = new Map(paths.map((t) => [t, []]));
  const unknown = new Map(paths.map((t) => [t, []]));
  const sent = new Map(paths.map((t) => [t, new Set()]));
  const observed = new Map(paths.map((t) => [t, []]));
  const events = [];
  for (const t of paths) await writer.topics.add(t, 'INT64', { CONFLATION: 'off' });
  await reader.topics.subscribe(`?${p}/`, (e) => {
    if (e.kind === 'subscribed' || e.kind === 'value') { if (e.value !== null) observed.get(e.path).push(e.value); } else events.push(e.kind);
  });
  writer.on('reconnected', (d) => events.push(`writer reconnected ${d.resumed}`));

  let n = 0;
  let refused = 0;
  const write = async () => {
    n += 1;
    const value = n;
    const results = await Promise.allSettled(paths.map((t) => { sent.get(t).add(value); return writer.topics.set(t, value); }));
    results.forEach((r, i) => {
      if (r.status === 'fulfilled') acknowledged.get(paths[i]).push(value);
      else if (r.reason instanceof ConnectionInterruptedError) unknown.get(paths[i]).push(value);
      else refused += 1;
    });
  };
  for (let i = 0; i < 20; i++) await write();
  const killed = python('kill-gateway', SERVE_PID);
  const before = writer.reconnects;
  // keep writing through the restart: requests made while disconnected wait for the next connection
  while (writer.reconnects === before || n < 40) {
    await write();
    if (writer.closed) break;
  }
  await killed;
  for (let i = 0; i < 20; i++) await write();
  assert.equal(writer.closed, false, String(writer.closeReason));

  const final = new Map((await writer.topics.fetch(`?${p}/`)).map((r) => [r.path, r.value]));
  const lost = [];
  const unexpected = [];
  const backwards = [];
  for (const t of paths) {
    const acks = acknowledged.get(t);
    const last = acks[acks.length - 1];
    if (!(final.get(t) >= last)) lost.push([t, last, final.get(t)]);
    const seen = observed.get(t);
    seen.forEach((v, i) => {
      if (!sent.get(t).has(v)) unexpected.push([t, v]);
      if (i && v < seen[i - 1]) backwards.push([t, v, seen[i - 1]]);
    });
  }
  assert.deepEqual({ lost, unexpected, backwards }, { lost: [], unexpected: [], backwards: [] });
  await until(() => paths.every((t) => observed.get(t).at(-1) === final.get(t)), 30, 'the reader to see every final value',
    () => JSON.stringify(paths.map((t) => [observed.get(t).at(-1), final.get(t)])));
  assert.ok(events.includes('disconnected') && events.includes('reconnected'), events.join());
  assert.ok(events.includes('writer reconnected false'), `the gateway restarted, so its sessions were new: ${events}`);
  const acked = paths.reduce((s, t) => s + acknowledged.get(t).length, 0);
  assert.ok(acked >= TOPICS * 40, `only ${acked} writes acknowledged (${refused} refused)`);
});
