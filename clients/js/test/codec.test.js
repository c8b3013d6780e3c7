// The msgpack and CBOR codecs: what they write reads back the same, what the Python side writes
// reads as it should, and bad bytes are refused with an error saying what is wrong.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as msgpack from '../src/msgpack.js';
import * as cbor from '../src/cbor.js';
import { encodeValue, decodeValue, InvalidValueError } from '../src/index.js';

// a small deterministic generator: the same values on every run, many shapes
function random(seed) {
  let x = seed;
  return () => { x = (x * 1103515245 + 12345) & 0x7fffffff; return x / 0x7fffffff; };
}

function value(rnd, depth = 0) {
  const r = rnd();
  if (depth > 3 || r < 0.5) {
    const k = Math.floor(rnd() * 9);
    switch (k) {
      case 0: return null;
      case 1: return rnd() < 0.5;
      case 2: return Math.floor(rnd() * 2 ** 31) - 2 ** 30;
      case 3: return Math.floor(rnd() * Number.MAX_SAFE_INTEGER);
      case 4: return 2n ** 53n + BigInt(Math.floor(rnd() * 2 ** 30)) * 2n ** 23n; // beyond a Number: a BigInt
      case 5: return (rnd() - 0.5) * 1e6;
      case 6: return String.fromCodePoint(...Array.from({ length: Math.floor(rnd() * 40) }, () => 32 + Math.floor(rnd() * 0x2ff)));
      case 7: return 'x'.repeat(Math.floor(rnd() * 70000 * (rnd() < 0.05 ? 1 : 0.001)));
      default: return -Math.floor(rnd() * 2 ** 40);
    }
  }
  if (r < 0.75) return Array.from({ length: Math.floor(rnd() * 20) }, () => value(rnd, depth + 1));
  const out = {};
  for (let i = Math.floor(rnd() * 20); i > 0; i--) out[`k${Math.floor(rnd() * 1000)}`] = value(rnd, depth + 1);
  return out;
}

test('msgpack reads back what it writes, for many shapes', () => {
  const rnd = random(7);
  for (let i = 0; i < 2000; i++) {
    const v = value(rnd);
    assert.deepEqual(msgpack.decode(msgpack.encode(v)), v);
  }
  const bin = new Uint8Array(70000).map((_, i) => i & 0xff);
  assert.deepEqual(msgpack.decode(msgpack.encode([bin])), [bin]);
});

test('CBOR reads back what it writes, for many shapes', () => {
  const rnd = random(11);
  for (let i = 0; i < 2000; i++) {
    const v = value(rnd);
    assert.deepEqual(cbor.decode(cbor.encode(v)), v);
  }
});

test('CBOR reads the forms Python cbor2 writes', () => {
  // 1.5 as a half float, 100000.0 as a single, a big integer tag, a negative 64-bit integer
  assert.equal(cbor.decode(new Uint8Array([0xf9, 0x3e, 0x00])), 1.5);
  assert.equal(cbor.decode(new Uint8Array([0xfa, 0x47, 0xc3, 0x50, 0x00])), 100000);
  assert.equal(cbor.decode(new Uint8Array([0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0])), 2n ** 64n);
  assert.equal(cbor.decode(new Uint8Array([0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])), -(2n ** 63n));
  assert.ok(Number.isNaN(cbor.decode(new Uint8Array([0xf9, 0x7e, 0x00]))));
});

test('bad bytes are refused, saying what is wrong', () => {
  assert.throws(() => cbor.decode(new Uint8Array([])), /empty value/);
  assert.throws(() => cbor.decode(new Uint8Array([0x62, 0x61])), /truncated/);
  assert.throws(() => cbor.decode(new Uint8Array([0x61, 0x61, 0x00])), /trailing bytes/);
  assert.throws(() => cbor.decode(new Uint8Array([0x9f, 0xff])), /indefinite lengths/);
  assert.throws(() => cbor.decode(new Uint8Array([0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02])), /appears twice/);
  assert.throws(() => cbor.decode(new Uint8Array([0xd8, 0x20, 0x60])), /tag 32/);
  assert.throws(() => cbor.decode(new Uint8Array([0x62, 0xc3, 0x28])), /UTF-8/);
  assert.throws(() => cbor.decode(new Uint8Array(Array(70).fill(0x81).concat([0x00]))), /deeper than 64/);
  assert.throws(() => msgpack.decode(new Uint8Array([0xc1])), /unsupported msgpack type 0xc1/);
  assert.throws(() => msgpack.decode(new Uint8Array([0x92, 0x01])), /truncated/);
  assert.throws(() => msgpack.decode(new Uint8Array([0x81, 0x01, 0x02])), /map key is not a string/);
  assert.throws(() => msgpack.encode(2n ** 64n), /outside the 64-bit range/);
});

test('values are checked against their topic type before they leave', () => {
  assert.throws(() => encodeValue('x', 'INT64'), InvalidValueError);
  assert.throws(() => encodeValue(2n ** 63n, 'INT64'), /outside the INT64 range/);
  assert.throws(() => encodeValue(1, 'STRING'), /STRING value must be a string/);
  assert.throws(() => encodeValue('x', 'BINARY'), /Uint8Array/);
  assert.throws(() => encodeValue(new Date(), 'JSON'), /cannot encode a Date/);
  assert.throws(() => encodeValue(1, 'TIME_SERIES'), /cannot set a value of type TIME_SERIES/);
  const [d, raw] = encodeValue(2, 'DOUBLE');
  assert.equal(raw, false);
  assert.equal(d[0], 0xfb); // a DOUBLE always travels as a float
  assert.equal(decodeValue('DOUBLE', d), 2);
  assert.deepEqual(encodeValue(new Uint8Array([1]))[1], true);
  assert.equal(decodeValue('INT64', encodeValue(2n ** 62n, 'INT64')[0]), 2n ** 62n);
  assert.equal(decodeValue('INT64', encodeValue(2 ** 60, 'INT64')[0]), 2n ** 60n);
});
