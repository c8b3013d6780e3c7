// Topic selectors, as far as a client needs them: to tell which of its subscriptions a topic the
// server announces belongs to. The server parses and checks every selector (a bad one is refused
// with INVALID_SELECTOR); this module only matches paths against selectors the server took.
//
//   >path          exactly that topic ('/' normalised; an expression without a prefix character
//                  is a path selector too)
//   ?re1/re2/...   one regular expression per path segment, each matching the whole segment
//   *regex         one regular expression matching the whole path
//   #s1////s2      any of the members
// A trailing '/' on a ? or * expression selects the descendants of what it matches, '//' the
// matches and their descendants.
//
// The server runs RE2; here JavaScript's RegExp runs the same expressions, which agree on the
// everyday syntax (classes, groups, alternation, quantifiers, \d \w \s in ASCII). A leading
// (?i) becomes the i flag. An expression JavaScript cannot compile (RE2-only syntax such as \pL
// or (?P<name>...)) matches every path under the selector's literal prefix: its subscription may
// then also see topics of the session's other subscriptions, never fewer than its own.

import { InvalidSelectorError } from './errors.js';

/** A path in normal form: no leading, trailing or repeated '/'. */
export function normalisePath(path) {
  return path.split('/').filter((s) => s.length > 0).join('/');
}

// RE2 syntax that JavaScript reads differently without an error (\pL is "pL" there)
const RE2_ONLY = /\\[pPQEzAC]|\(\?P<|\[\[:/;

function compile(source) {
  if (RE2_ONLY.test(source)) return null;
  let flags = '';
  let body = source;
  if (body.startsWith('(?i)')) { flags = 'i'; body = body.slice(4); }
  try {
    return new RegExp(`^(?:${body})$`, flags);
  } catch {
    return null;
  }
}

function literalPrefix(source) {
  const m = /^[A-Za-z0-9_\-/]*/.exec(source);
  return m ? m[0] : '';
}

function qualifier(body) {
  if (body.endsWith('//')) return { body: body.slice(0, -2), self: true, descendants: true };
  if (body.endsWith('/') && !body.endsWith('\\/')) return { body: body.slice(0, -1), self: false, descendants: true };
  return { body, self: true, descendants: false };
}

function splitPath(expression) {
  const q = qualifier(expression.slice(1).replace(/^\//, ''));
  const parts = q.body.split('/');
  const res = parts.map(compile);
  if (res.some((r) => r === null)) {
    const prefix = parts.slice(0, parts.findIndex((p, i) => res[i] === null || literalPrefix(p) !== p));
    return prefixMatcher(prefix.join('/'));
  }
  return (path) => {
    const segments = path.split('/');
    if (segments.length < parts.length) return false;
    if (segments.length === parts.length ? !q.self : !q.descendants) return false;
    for (let i = 0; i < parts.length; i++) if (!res[i].test(segments[i])) return false;
    return true;
  };
}

function fullPath(expression) {
  const q = qualifier(expression.slice(1));
  const re = compile(q.body);
  if (re === null) return prefixMatcher(normalisePath(literalPrefix(q.body)).split('/').slice(0, -1).join('/'));
  return (path) => {
    if (q.self && re.test(path)) return true;
    if (!q.descendants) return false;
    for (let i = path.indexOf('/'); i > 0; i = path.indexOf('/', i + 1)) {
      if (re.test(path.slice(0, i))) return true;
    }
    return false;
  };
}

function prefixMatcher(prefix) {
  const p = normalisePath(prefix);
  return p ? (path) => path === p || path.startsWith(`${p}/`) : () => true;
}

const RESERVED = new Set(['$', '%', '&', '<']);

/** A function telling whether a path (normal form) matches `expression`. */
export function matcher(expression) {
  if (typeof expression !== 'string' || expression.length === 0) {
    throw new InvalidSelectorError(`a selector must be a non-empty string, got ${JSON.stringify(expression)}`);
  }
  const first = expression[0];
  if (first === '#') {
    const members = expression.slice(1).split('////').filter((m) => m.length > 0).map(matcher);
    return (path) => members.some((m) => m(path));
  }
  if (first === '?') return splitPath(expression);
  if (first === '*') return fullPath(expression);
  if (RESERVED.has(first)) {
    throw new InvalidSelectorError(`a selector may not start with ${first} (reserved); a path selector starts with >`);
  }
  const exact = normalisePath(first === '>' ? expression.slice(1) : expression);
  return (path) => path === exact;
}
