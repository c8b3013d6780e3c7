// Which subscription a topic belongs to: the client's selector matching agrees with the server's
// rules (topics/selectors.py) on the forms applications use.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { matcher, InvalidSelectorError } from '../src/index.js';

const cases = [
  ['>a/b', 'a/b', true], ['>a/b', 'a/b/c', false], ['a//b/', 'a/b', true], ['>/a/b', 'a/b', true],
  ['?a/.*', 'a/x', true], ['?a/.*', 'a/x/y', false], ['?a/.*', 'a', false],
  ['?a/', 'a/x', true], ['?a/', 'a', false], ['?a/', 'a/x/y', true],
  ['?a//', 'a', true], ['?a//', 'a/x/y', true], ['?a//', 'b', false], ['?/a/b', 'a/b', true],
  ['?[a-c]/\\d+', 'b/12', true], ['?[a-c]/\\d+', 'd/12', false], ['?a|b/x', 'b/x', true],
  ['*a/.*', 'a/x/y', true], ['*a/.*', 'b/x', false], ['*a/x', 'a/x/y', false],
  ['*a/x/', 'a/x/y', true], ['*a/x/', 'a/x', false], ['*a/x//', 'a/x', true], ['*a/x//', 'a/x/y/z', true],
  ['#>a////?b/.*', 'b/c', true], ['#>a////?b/.*', 'a', true], ['#>a////?b/.*', 'c', false],
  ['*(?i)ABC', 'abc', true], ['?x/\\pL', 'x/y', true], ['?x/\\pL', 'z/y', false],
];

test('selectors match as the server matches', () => {
  for (const [selector, path, expected] of cases) {
    assert.equal(matcher(selector)(path), expected, `${selector} against ${path}`);
  }
});

test('an expression the server would refuse is refused here too', () => {
  assert.throws(() => matcher(''), InvalidSelectorError);
  assert.throws(() => matcher('$a'), /reserved/);
  assert.throws(() => matcher(7), InvalidSelectorError);
});
