// Deltas made by the server's code (topics/deltas.py, run through CANOPY_PYTHON) apply here to
// the same values, and a damaged or misplaced delta is refused, never applied to a wrong value.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { applyDelta, DeltaError } from '../src/deltas.js';

const PYTHON = process.env.CANOPY_PYTHON;
const skip = PYTHON ? false : 'CANOPY_PYTHON is not set: run through tests/e2e/test_js_client.py (make test)';

const MAKE = `
import json, random
from topics.deltas import diff
r = random.Random(7)
cases = []
for n in range(300):
    size = r.choice([0, 1, 17, 200, 2048, 9000])
    a = bytes(r.getrandbits(8) if r.random() < 0.3 else 97 + r.randrange(4) for _ in range(size))
    b = bytearray(a)
    for _ in range(r.randrange(4)):
        at = r.randrange(len(b) + 1)
        if r.random() < 0.5:
            b[at:at] = bytes(r.getrandbits(8) for _ in range(r.randrange(40)))
        else:
            del b[at:at + r.randrange(40)]
    cases.append([a.hex(), bytes(b).hex(), diff(a, bytes(b)).hex()])
print(json.dumps(cases))
`;

const hex = (s) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));

test('every delta the server makes applies to its basis', { skip }, () => {
  const cases = JSON.parse(execFileSync(PYTHON, ['-c', MAKE], { cwd: process.env.CANOPY_REPO, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }));
  assert.equal(cases.length, 300);
  for (const [a, b, d] of cases) {
    assert.deepEqual(applyDelta(hex(d), hex(a)), hex(b));
  }
});

test('a damaged delta or another basis is refused', { skip }, () => {
  const cases = JSON.parse(execFileSync(PYTHON, ['-c', MAKE], { cwd: process.env.CANOPY_REPO, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }));
  let refused = 0;
  for (const [a, b, d] of cases.filter(([a]) => a.length > 100).slice(0, 60)) {
    const delta = hex(d);
    const basis = hex(a);
    const other = basis.slice();
    other[other.length >> 1] ^= 0x40;
    const damaged = delta.slice();
    damaged[damaged.length - 1] ^= 1;
    for (const [x, y] of [[delta, other], [damaged, basis], [delta.subarray(0, delta.length - 1), basis]]) {
      let out = null;
      try {
        out = applyDelta(x, y);
      } catch (e) {
        if (!(e instanceof DeltaError)) throw e;
        refused += 1;
      }
      // what applies is the right value (a change the delta does not read): never a wrong one
      if (out !== null) assert.deepEqual(out, hex(b));
    }
  }
  assert.ok(refused > 100, `${refused} refused`);
  assert.throws(() => applyDelta(new Uint8Array([]), new Uint8Array([])), DeltaError);
  assert.throws(() => applyDelta(new Uint8Array([2, 0, 0, 0, 0, 0, 0]), new Uint8Array([])), /version 2/);
});
