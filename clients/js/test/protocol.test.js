// The client speaks the protocol docs/PROTOCOL.md describes (made from canopy/protocol.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as P from '../src/protocol.js';

const here = new URL('.', import.meta.url);
const doc = readFileSync(new URL('../../../docs/PROTOCOL.md', here), 'utf8');

test('the version is the document\'s', () => {
  const m = /^# canopy wire protocol, version (\d+)$/m.exec(doc);
  assert.ok(m, 'no version heading in docs/PROTOCOL.md');
  assert.equal(P.PROTOCOL_VERSION, Number(m[1]));
});

test('every message type has the document\'s code and fields', () => {
  const rows = [...doc.matchAll(/^\| (\d+) \| ([A-Z]+) \| (\d+) \|$/gm)];
  assert.equal(rows.length, Object.keys(P.FIELDS).length);
  for (const [, code, name, fields] of rows) {
    assert.equal(P[name], Number(code), `${name}'s code`);
    assert.equal(P.FIELDS[name], Number(fields), `${name}'s fields`);
  }
});

test('every operation the client sends is one the document lists', () => {
  const documented = new Set([...doc.matchAll(/^\| `([a-z_]+)` \|$/gm)].map((m) => m[1]));
  const source = readFileSync(new URL('../src/session.js', here), 'utf8');
  const sent = new Set([...source.matchAll(/\.(?:request|send|sendAgain)\('([a-z_]+)'/g)].map((m) => m[1]));
  assert.ok(sent.size > 20, `found only ${sent.size} operations in session.js`);
  const missing = [...sent].filter((op) => !documented.has(op));
  assert.deepEqual(missing, [], `operations sent but not in docs/PROTOCOL.md: ${missing}`);
});
