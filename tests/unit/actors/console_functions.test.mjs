// The console's functions that need no page (console/static/*.js), under `node --test`:
// run by tests/unit/actors/test_console.py when a node is installed.
import { test } from 'node:test';
import assert from 'node:assert/strict';

const STATIC = new URL('../../../console/static/', import.meta.url);
const { parseValue, belowSelector, childrenSelector } = await import(new URL('topics.js', STATIC));
const { errorPosition, targetBranch } = await import(new URL('views.js', STATIC));
const { updateRate, sessionCount } = await import(new URL('cluster.js', STATIC));
const { niceCeiling } = await import(new URL('chart.js', STATIC));
const { valueText, keyValues, clip } = await import(new URL('dom.js', STATIC));

test('a branch is listed and subscribed with its segments escaped', () => {
  assert.equal(belowSelector(''), '?.*//');
  assert.equal(childrenSelector(''), '?.+');
  assert.equal(belowSelector('a.b/c+d'), '?a\\.b/c\\+d/');
  assert.equal(childrenSelector('$SYS/x(1)'), '?\\$SYS/x\\(1\\)/.+');
});

test('values typed into a form are read by the topic type, strictly', () => {
  assert.equal(parseValue(' 42 ', 'INT64'), 42);
  assert.equal(parseValue('9007199254740993', 'INT64'), 9007199254740993n);
  assert.throws(() => parseValue('4.2', 'INT64'), /not an integer/);
  assert.equal(parseValue('-inf', 'DOUBLE'), -Infinity);
  assert.ok(Number.isNaN(parseValue('NaN', 'DOUBLE')));
  assert.throws(() => parseValue('', 'DOUBLE'), /not a number/);
  assert.throws(() => parseValue('1e400', 'DOUBLE'), /not a number/);
  assert.deepEqual(parseValue('{"a": [1]}', 'JSON'), { a: [1] });
  assert.throws(() => parseValue('{', 'JSON'), (e) => e.code === 'INVALID_VALUE');
  assert.deepEqual(parseValue('AAEC', 'BINARY'), Uint8Array.from([0, 1, 2]));
  assert.equal(parseValue(' as is ', 'STRING'), ' as is ');
  assert.throws(() => parseValue('x', 'TIME_SERIES'), (e) => e.code === 'INVALID_TYPE');
});

test('a view error names its line and column; a view names the branch it makes', () => {
  assert.deepEqual(errorPosition('topic view syntax error at line 2, column 22: unexpected'), { line: 2, column: 22 });
  assert.equal(errorPosition('no position'), null);
  assert.equal(targetBranch('map ?a// to views/b/<path(1)>'), 'views/b');
  assert.equal(targetBranch('map >a to exact/path'), 'exact/path');
});

test('updates/s is the growth of the journal positions of the partitions known both times', () => {
  const before = { partitions: [{ partition: 0, sequence: 10 }, { partition: 1, sequence: null }] };
  const after = { partitions: [{ partition: 0, sequence: 30 }, { partition: 1, sequence: 99 }] };
  assert.equal(updateRate(before, after, 2), 10);
  assert.equal(updateRate(null, after, 2), null);
  assert.equal(updateRate(after, before, 2), 0); // a position that went back (a new primary) is no negative rate
  assert.equal(sessionCount({ gateways: [{ sessions: 2 }, { sessions: null }, { sessions: 3 }] }), 5);
  assert.equal(sessionCount({ gateways: [{ sessions: null }] }), null);
});

test('text helpers', () => {
  assert.equal(niceCeiling(0), 1);
  assert.equal(niceCeiling(37), 50);
  assert.equal(niceCeiling(101), 200);
  assert.equal(valueText({ big: 2n ** 64n }, 'JSON'), '{"big":"18446744073709551616"}');
  assert.equal(valueText(null, 'STRING'), '');
  assert.match(clip('x'.repeat(300)), /… \(300 characters\)$/);
  assert.deepEqual(keyValues('A=1\n\n B = two=2 '), { A: '1', B: ' two=2' });
  assert.throws(() => keyValues('novalue'), /line 1/);
});
