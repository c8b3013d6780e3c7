// A canopy session over WebSocket: the same semantics as the Python client (canopy/client.py).
//
// Requests made in one synchronous run share a frame (sent in a microtask). Topic notifications
// go to the subscriptions whose selector matches, through their callbacks, as they arrive.
//
// Reconnecting: when the connection drops (not closed by the client, nor ended by the server for
// good) the session reconnects for up to `reconnectTimeout` seconds, trying the URLs in turn
// from the one it had, `retryDelay` seconds apart (with jitter). Meanwhile requests in flight
// fail with ConnectionInterruptedError (their outcome is unknown; subscribe and unsubscribe are
// made again instead), requests made while disconnected wait, and every subscription gets a
// `disconnected` event and the session a 'disconnected' event. On the next connection the
// session is resumed when the server still has it, else a new one is opened and every selector
// subscribed again; each subscription is then told the current state (`value` events for the
// topics it knew, `subscribed` for new ones, `unsubscribed` with reason DISCONNECTED for those
// that went) and then `reconnected` (reason RESUMED or NEW_SESSION), and the session emits
// 'reconnected'. The session ends for good ('closed') when the timeout passes, the server
// refuses the new HELLO, or the server ends the session on purpose.

import * as cbor from './cbor.js';
import * as msgpack from './msgpack.js';
import * as P from './protocol.js';
import {
  CanopyError, ConnectError, ConnectionInterruptedError, FrameTooLargeError, InvalidQueryError, InvalidRequestError,
  InvalidValueError, InvalidPropertiesError, ProtocolViolationError, SessionClosedError, UnavailableError, errorFor,
} from './errors.js';
import { matcher } from './selectors.js';
import { applyDelta } from './deltas.js';

export const TopicType = Object.freeze({
  STRING: 'STRING', INT64: 'INT64', DOUBLE: 'DOUBLE', JSON: 'JSON', BINARY: 'BINARY', TIME_SERIES: 'TIME_SERIES',
});
const VALUE_TYPES = new Set(['STRING', 'INT64', 'DOUBLE', 'JSON', 'BINARY']);
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

export const GONE_WHILE_DISCONNECTED = 'DISCONNECTED';
export const RESUMED = 'RESUMED';
export const NEW_SESSION = 'NEW_SESSION';

// -- values -------------------------------------------------------------------------------------

function describe(value) {
  if (value === null) return 'null';
  if (value instanceof Uint8Array) return 'bytes';
  return Array.isArray(value) ? 'an array' : typeof value;
}

/** `value` as the bytes a topic of `type` stores, and whether they are raw (BINARY). */
export function encodeValue(value, type) {
  try {
    if (type === undefined || type === null) {
      if (value instanceof Uint8Array) return [value, true];
      return [cbor.encode(value), false];
    }
    switch (type) {
      case 'BINARY':
        if (value instanceof Uint8Array) return [value, true];
        throw new InvalidValueError(`a BINARY value must be a Uint8Array, got ${describe(value)}`);
      case 'JSON': return [cbor.encode(value), false];
      case 'STRING':
        if (value === null || typeof value === 'string') return [cbor.encode(value), false];
        throw new InvalidValueError(`a STRING value must be a string, got ${describe(value)}`);
      case 'INT64':
        if (value === null) return [cbor.encode(null), false];
        if ((typeof value === 'number' && Number.isInteger(value)) || typeof value === 'bigint') {
          const big = BigInt(value);
          if (big < INT64_MIN || big > INT64_MAX) throw new InvalidValueError(`${value} is outside the INT64 range`);
          if (typeof value === 'number' && !Number.isSafeInteger(value)) return [cbor.encode(big), false];
          return [cbor.encode(value), false];
        }
        throw new InvalidValueError(`an INT64 value must be an integer (number or BigInt), got ${describe(value)}`);
      case 'DOUBLE': {
        if (value === null) return [cbor.encode(null), false];
        if (typeof value !== 'number') throw new InvalidValueError(`a DOUBLE value must be a number, got ${describe(value)}`);
        const b = new Uint8Array(9);
        b[0] = 0xfb;
        new DataView(b.buffer).setFloat64(1, value);
        return [b, false];
      }
      default:
        throw new InvalidValueError(`cannot set a value of type ${type}`);
    }
  } catch (e) {
    if (e instanceof CanopyError) throw e;
    throw new InvalidValueError(e.message);
  }
}

/** The value of bytes stored for a topic (or time series event) of `type`. */
export function decodeValue(type, data) {
  if (type === 'BINARY') return data;
  const value = cbor.decode(data);
  if (type === 'DOUBLE' && typeof value === 'bigint') return Number(value);
  return value;
}

function eventType(spec) {
  return spec.type === 'TIME_SERIES' ? (spec.properties.TIME_SERIES_EVENT_VALUE_TYPE ?? 'STRING') : spec.type;
}

// -- a tiny event emitter (the same in browsers and Node) ---------------------------------------

/** An exception a callback of the application threw: reported, and the session goes on (as the
 * Python client logs it). Rethrowing it would end a Node process. */
function reportCallbackError(e) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(e);
  else console.error('canopy-client: a callback failed:', e);
}

class Emitter {
  constructor() { this.listeners = new Map(); }

  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name)?.delete(fn);
  }

  emit(name, detail) {
    for (const fn of [...(this.listeners.get(name) ?? [])]) {
      try { fn(detail); } catch (e) { reportCallbackError(e); }
    }
  }
}

// -- WebSocket: the platform's, or the `ws` package under a Node without one -------------------

async function webSocketClass(given) {
  if (given) return given;
  if (typeof globalThis.WebSocket === 'function') return globalThis.WebSocket;
  try {
    const mod = await import('ws');
    return mod.WebSocket ?? mod.default;
  } catch {
    throw new ConnectError('no WebSocket here: use Node 22 or later, install the ws package, or pass options.WebSocket');
  }
}

function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (Array.isArray(data)) { // ws may hand fragments
    const n = data.reduce((s, b) => s + b.length, 0);
    const out = new Uint8Array(n);
    let at = 0;
    for (const b of data) { out.set(b, at); at += b.length; }
    return out;
  }
  return null;
}

/**
 * Open a WebSocket to `url` and exchange HELLO/WELCOME. Resolves to {ws, welcome, rest} (rest:
 * the messages after the WELCOME in its frame); rejects with the server's error for a refused
 * HELLO, ConnectError when the server cannot be reached or does not answer in time.
 */
function dial(WS, url, hello, timeoutMs) {
  return new Promise((resolve, reject) => {
    let ws;
    try {
      ws = new WS(url);
    } catch (e) {
      reject(new ConnectError(`cannot connect to ${url}: ${e.message}`));
      return;
    }
    ws.binaryType = 'arraybuffer';
    let settled = false;
    const early = [];
    const after = { closed: null }; // a close between the WELCOME and the session taking the socket
    const finish = (error, value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error) {
        try { ws.close(); } catch { /* closing a socket that never opened */ }
        reject(error);
      } else {
        resolve(value);
      }
    };
    const timer = setTimeout(() => finish(new ConnectError(`${url} did not answer within ${timeoutMs / 1000} s`)), timeoutMs);
    ws.onopen = () => ws.send(hello);
    ws.onerror = (e) => finish(new ConnectError(`cannot connect to ${url}${e?.message ? `: ${e.message}` : ''}`));
    ws.onclose = (e) => (settled ? (after.closed = e) : finish(new ConnectError(`cannot connect to ${url} (closed with code ${e.code}${e.reason ? ` ${e.reason}` : ''})`)));
    ws.onmessage = (e) => {
      if (settled) { early.push(e.data); return; }
      const bytes = toBytes(e.data);
      let items;
      try {
        items = msgpack.decode(bytes);
      } catch (err) {
        finish(new ConnectError(`handshake with ${url} failed: ${err.message}`));
        return;
      }
      const first = Array.isArray(items) ? items[0] : null;
      if (Array.isArray(first) && first[0] === P.ERROR) {
        finish(errorFor(String(first[2]), String(first[3])));
      } else if (Array.isArray(first) && first[0] === P.WELCOME && first.length === P.FIELDS.WELCOME + 1) {
        if (first[1] !== P.PROTOCOL_VERSION) {
          finish(new ProtocolViolationError(`the server speaks protocol version ${first[1]}, not ${P.PROTOCOL_VERSION}`));
          return;
        }
        const [, , sessionId, properties, maxFrameSize, root, maxMessages, resumeToken, resumed, refresh] = first;
        finish(null, {
          ws, early, after, rest: items.slice(1),
          welcome: { sessionId, properties, maxFrameSize, root, maxMessages, resumeToken, resumed, refresh },
        });
      } else {
        finish(new ConnectError(`handshake with ${url} failed: unexpected reply`));
      }
    };
  });
}

// -- subscriptions --------------------------------------------------------------------------------

export class Subscription {
  constructor(session, selector, callback) {
    this.session = session;
    this.selector = selector;
    this.matches = matcher(selector);
    this.callback = callback;
    this.ended = false;
    this.down = false;
  }

  put(event) {
    if (this.ended) return;
    try {
      this.callback(event);
    } catch (e) {
      reportCallbackError(e);
    }
  }

  /** Stop receiving this selector's topics (every subscription of the session to it ends). */
  unsubscribe() { return this.session.topics.unsubscribe(this.selector); }
}

function topicEvent(kind, topic, value, extra = {}) {
  return {
    kind, path: topic.path, type: topic.spec.type, value, specification: topic.spec,
    reason: null, retained: true, event: null, ...extra,
  };
}

function connectionEvent(kind, reason, value = null) {
  return { kind, path: '', type: null, value, specification: null, reason, retained: true, event: null };
}

// -- the session ----------------------------------------------------------------------------------

export class Session extends Emitter {
  constructor(dialer, url, opened) {
    super();
    this.dialer = dialer;
    this.url = url;
    this.closed = false;
    this.closeReason = null;
    this.reconnects = 0;
    /** errors the server reported outside any request */
    this.errors = [];
    /** bytes of values the server sent as smaller deltas (delta streaming), and deltas that failed */
    this.deltaBytesSaved = 0;
    this.deltasFailed = 0;
    this.nextId = 1;
    this.pending = new Map(); // cid -> {resolve, reject, convert}
    this.outgoing = []; // encoded messages not sent yet
    this.flushScheduled = false;
    this.subscriptions = [];
    this.aliases = new Map(); // alias -> topic {path, spec, value, sequence}
    this.routes = new Map(); // alias -> [Subscription]
    this.known = new Map(); // path -> topic the subscriptions were told of
    this.unrequested = null; // topics no subscription matches (another session subscribed this one)
    this.resync = null;
    this.reconnecting = null;
    this.serverClose = null;
    this.handlers = new Map(); // missing-topic registration -> {path, handler, closed}
    this.topics = new Topics(this);
    this.timeSeries = new TimeSeries(this);
    this.views = new Views(this);
    this.sessions = new Sessions(this);
    this.security = new Security(this);
    this.sessionTrees = new SessionTrees(this);
    this.missingTopics = new MissingTopics(this);
    this.server = new Server(this);
    this.metrics = new Metrics(this);
    this.fanout = { list: () => this.request('fanout_list') };
    this.remoteServers = { list: () => this.request('server_list'), check: (name) => this.request('server_check', name) };
    this.attach(url, opened, true);
  }

  /** Whether the session has a connection now. */
  get connected() { return this.ws !== null && !this.closed; }

  // -- requests ------------------------------------------------------------------------------------

  /** Send a request (any operation of the protocol); resolves to its result. */
  request(op, ...args) {
    return this.send(op, args);
  }

  send(op, args, convert = null) {
    if (this.closed) return Promise.reject(this.closeReason ?? new SessionClosedError('the session is closed'));
    const cid = this.nextId++;
    let message;
    try {
      message = msgpack.encode([P.REQUEST, cid, op, args]);
    } catch (e) {
      return Promise.reject(new InvalidRequestError(`${op} request cannot be encoded: ${e.message}`));
    }
    if (message.length + P.FRAME_OVERHEAD > this.maxFrameSize) {
      return Promise.reject(new FrameTooLargeError(
        `${op} request of ${message.length} bytes exceeds the frame limit of ${this.maxFrameSize} (the server's maximum frame size)`));
    }
    const promise = new Promise((resolve, reject) => this.pending.set(cid, { resolve, reject, convert }));
    this.outgoing.push(message);
    this.scheduleFlush();
    return promise;
  }

  /** A request that may be made twice (subscribe, unsubscribe): made again when the connection drops. */
  async sendAgain(op, args) {
    for (;;) {
      try {
        return await this.send(op, args);
      } catch (e) {
        if (!(e instanceof ConnectionInterruptedError)) throw e;
      }
    }
  }

  scheduleFlush() {
    if (this.flushScheduled || this.ws === null) return;
    this.flushScheduled = true;
    queueMicrotask(() => this.flush());
  }

  flush() {
    this.flushScheduled = false;
    const ws = this.ws;
    if (ws === null || this.outgoing.length === 0) return;
    const messages = this.outgoing;
    this.outgoing = [];
    let batch = [];
    let size = P.FRAME_OVERHEAD;
    for (const m of messages) {
      if (batch.length && (size + m.length > this.maxFrameSize || batch.length >= this.maxMessages)) {
        ws.send(msgpack.frame(batch));
        batch = [];
        size = P.FRAME_OVERHEAD;
      }
      batch.push(m);
      size += m.length;
    }
    if (batch.length) ws.send(msgpack.frame(batch));
  }

  // -- connections ----------------------------------------------------------------------------------

  attach(url, opened, first = false) {
    const { ws, welcome } = opened;
    const resumed = !first && welcome.resumed && welcome.sessionId === this.sessionId;
    this.ws = ws;
    this.url = url;
    this.serverClose = null;
    this.resumeToken = welcome.resumeToken;
    this.sessionId = welcome.sessionId;
    this.properties = welcome.properties;
    this.maxFrameSize = welcome.maxFrameSize;
    this.maxMessages = welcome.maxMessages;
    this.root = welcome.root;
    ws.onmessage = (e) => { if (this.ws === ws) this.receive(e.data); };
    ws.onclose = (e) => { if (this.ws === ws) this.lost(e); };
    ws.onerror = () => {};
    if (!first) {
      this.reconnects += 1;
      const previous = this.aliases;
      this.aliases = new Map();
      this.routes = new Map();
      if (resumed) {
        this.resync = { resumed: true, remaining: welcome.refresh, previous, seen: new Set() };
        if (!welcome.refresh) this.resynced(this.resync);
      } else {
        const selectors = [...new Set(this.subscriptions.map((s) => s.selector))];
        const resync = this.resync = {
          resumed: false, remaining: selectors.length, previous: new Map(), seen: new Set(),
          deadline: Date.now() + this.dialer.reconnectTimeout * 1000,
        };
        for (const selector of selectors) this.resubscribe(resync, selector);
        if (!selectors.length) this.resynced(resync);
        this.missingTopics.registerAgain();
      }
    }
    for (const m of opened.rest) this.dispatch(m);
    for (const data of opened.early) this.receive(data);
    this.scheduleFlush();
    if (opened.after.closed && this.ws === ws) this.lost(opened.after.closed); // it went before the session heard
  }

  resubscribe(resync, selector) {
    if (this.resync !== resync || this.closed) return;
    this.send('subscribe', [selector]).then(
      () => this.resubscribed(resync, selector, null),
      (e) => this.resubscribed(resync, selector, e),
    );
  }

  resubscribed(resync, selector, error) {
    if (this.resync !== resync) return;
    if (error instanceof UnavailableError && Date.now() < resync.deadline) {
      // a gateway whose way to a partition is still failing over: the subscription waits for it
      setTimeout(() => this.resubscribe(resync, selector), this.dialer.retryDelay * 1000 * (0.5 + Math.random()));
      return;
    }
    if (error && !(error instanceof ConnectionInterruptedError)) {
      for (const sub of this.subscriptions.filter((s) => s.selector === selector)) this.endSubscription(sub);
      this.reroute();
    }
    resync.remaining -= 1;
    if (resync.remaining <= 0) this.resynced(resync);
  }

  resynced(resync) {
    if (this.resync !== resync) return;
    this.resync = null;
    for (const [path, gone] of [...this.known]) {
      if (resync.seen.has(path)) continue;
      this.known.delete(path);
      this.fanOut(topicEvent('unsubscribed', gone, null, { reason: GONE_WHILE_DISCONNECTED }));
    }
    const how = resync.resumed ? RESUMED : NEW_SESSION;
    const notice = connectionEvent('reconnected', how, this.sessionId);
    for (const sub of [...this.subscriptions]) {
      if (sub.down) {
        sub.down = false;
        sub.put(notice);
      }
    }
    this.emit('reconnected', { resumed: resync.resumed, sessionId: this.sessionId });
  }

  whyLost(e) {
    if (this.closing || this.closeReason) return [this.closeReason ?? new SessionClosedError('the session is closed'), true];
    const close = this.serverClose;
    if (close) return [new SessionClosedError(close.message, close.code), !P.RESUMABLE_CLOSES.has(close.code)];
    const code = e?.code;
    if (code === 1009) return [new FrameTooLargeError('the server closed the session: frame too large'), true];
    const detail = code ? ` (${code}${e.reason ? ` ${e.reason}` : ''})` : '';
    const final = code !== undefined && (P.FINAL_CLOSE_CODES.has(code) || (code >= 4000 && code < 5000));
    return [new SessionClosedError(`the session is closed${detail}`), final];
  }

  lost(e) {
    this.ws = null;
    this.flushScheduled = false;
    const [error, final] = this.whyLost(e);
    if (final || this.dialer.reconnectTimeout <= 0) {
      this.end(error);
      return;
    }
    const close = this.serverClose;
    let how;
    if (close) how = `the server closed it (${close.code}: ${close.message})`;
    else if (!e?.code || e.code === 1006) how = 'it was dropped';
    else how = `it closed with code ${e.code}${e.reason ? ` ${e.reason}` : ''}`;
    const lostText = `the connection to ${this.url} was lost (${how})`;
    const interrupted = new ConnectionInterruptedError(`${lostText}; the request was in flight: its outcome is unknown`);
    const pending = this.pending;
    this.pending = new Map();
    for (const p of pending.values()) p.reject(interrupted);
    this.outgoing = [];
    this.resync = null;
    const notice = connectionEvent('disconnected', lostText);
    for (const sub of [...this.subscriptions]) {
      if (!sub.down) {
        sub.down = true;
        sub.put(notice);
      }
    }
    this.emit('disconnected', { reason: lostText });
    this.reconnecting = this.reconnect(error);
  }

  async reconnect(cause) {
    const { urls, reconnectTimeout, retryDelay } = this.dialer;
    const deadline = Date.now() + reconnectTimeout * 1000;
    const first = Math.max(urls.indexOf(this.url), 0);
    let last = cause;
    for (let attempt = 0; ; attempt++) {
      if (attempt) {
        const wait = Math.min(retryDelay * 1000 * (0.5 + Math.random()), Math.max(deadline - Date.now(), 0));
        await new Promise((r) => { setTimeout(r, wait); });
      }
      if (this.closed) return;
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      const url = urls[(first + attempt) % urls.length];
      const hello = this.dialer.hello([this.sessionId, this.resumeToken]);
      let opened;
      try {
        opened = await dial(this.dialer.WebSocket, url, hello, Math.min(this.dialer.timeout * 1000, remaining));
      } catch (e) {
        if (e instanceof ConnectError) { last = e; continue; }
        this.reconnecting = null;
        this.end(new SessionClosedError(`could not reconnect to ${url}: ${e.message}`, e.code));
        return;
      }
      if (this.closed) { opened.ws.close(1000); return; }
      this.reconnecting = null;
      this.attach(url, opened);
      return;
    }
    this.reconnecting = null;
    this.end(new SessionClosedError(`could not reconnect within ${reconnectTimeout} s: ${last.message}`, 'RECONNECT_TIMEOUT'));
  }

  end(error) {
    if (this.closed) return;
    this.closed = true;
    if (!this.closeReason) this.closeReason = error;
    const ws = this.ws;
    this.ws = null;
    this.resync = null;
    if (ws) { try { ws.close(1000); } catch { /* already closing */ } }
    const pending = this.pending;
    this.pending = new Map();
    for (const p of pending.values()) p.reject(this.closeReason);
    this.outgoing = [];
    for (const sub of this.subscriptions) sub.ended = true;
    this.subscriptions = [];
    if (this.unrequested) this.unrequested.ended = true;
    this.emit('closed', { error: this.closing ? null : this.closeReason });
  }

  /** End the session (at once on the server too); closing a closed session does nothing. */
  close() {
    if (this.closed) return Promise.resolve();
    this.closing = true;
    this.closeReason = new SessionClosedError('the session was closed by the client');
    const ws = this.ws;
    if (!ws) {
      this.end(this.closeReason);
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => { clearTimeout(timer); this.end(this.closeReason); resolve(); };
      const timer = setTimeout(done, 5000);
      ws.onclose = done;
      try { ws.close(1000); } catch { done(); }
    });
  }

  // -- what the server sends -----------------------------------------------------------------------

  receive(data) {
    const bytes = toBytes(data);
    let items;
    try {
      if (bytes === null) throw new Error('a text frame');
      items = msgpack.decode(bytes);
      if (!Array.isArray(items)) throw new Error('a frame must be an array of messages');
    } catch (e) {
      this.closeReason = new ProtocolViolationError(`the server sent ${e.message}`);
      this.ws?.close(1002, 'PROTOCOL_ERROR');
      return;
    }
    for (const m of items) {
      if (Array.isArray(m)) this.dispatch(m);
    }
  }

  dispatch(m) {
    switch (m[0]) {
      case P.VALUE: {
        const topic = this.aliases.get(m[1]);
        if (!topic || !(m[2] instanceof Uint8Array)) return;
        topic.basis = m[2];
        this.value(m[1], topic, m[2], m.length < 4 || m[3] !== false);
        return;
      }
      case P.DELTA: {
        const topic = this.aliases.get(m[1]);
        if (!topic || !(m[2] instanceof Uint8Array)) return;
        let data;
        try {
          if (!(topic.basis instanceof Uint8Array)) throw new Error('no value to apply it to');
          data = applyDelta(m[2], topic.basis);
        } catch (e) {
          this.deltaFailed(m[1], topic, e);
          return;
        }
        this.deltaBytesSaved += data.length - m[2].length;
        topic.basis = data;
        this.value(m[1], topic, data, true);
        return;
      }
      case P.RESPONSE: {
        const p = this.pending.get(m[1]);
        if (p) {
          this.pending.delete(m[1]);
          try {
            p.resolve(p.convert ? p.convert(m[2]) : m[2]);
          } catch (e) {
            p.reject(e instanceof CanopyError ? e : new CanopyError(`could not read the answer: ${e.message}`, 'INTERNAL'));
          }
        }
        return;
      }
      case P.ERROR: {
        const error = errorFor(String(m[2]), String(m[3]));
        const p = m[1] ? this.pending.get(m[1]) : undefined;
        if (p) {
          this.pending.delete(m[1]);
          p.reject(error);
        } else {
          this.errors.push(error);
        }
        return;
      }
      case P.SUBSCRIBED: this.subscribed(m); return;
      case P.UNSUBSCRIBED: {
        const gone = this.aliases.get(m[1]);
        this.aliases.delete(m[1]);
        this.routes.delete(m[1]);
        if (gone) {
          if (this.known.get(gone.path) === gone) this.known.delete(gone.path);
          this.fanOut(topicEvent('unsubscribed', gone, null, { reason: m[2] }));
        }
        return;
      }
      case P.EVENT: {
        this.timeSeriesEvent(m);
        const resync = this.resync;
        if (resync?.resumed) this.refreshed(resync);
        return;
      }
      case P.CLOSE: this.serverClose = { code: String(m[1]), message: String(m[2]) }; return;
      case P.NOTIFY:
        if (m[1] === 'missing_topic') this.missingTopics.notified(m[2]);
        return;
      default:
    }
  }

  value(alias, topic, data, retained) {
    const value = this.decode(topic.spec, data);
    if (value === undefined) return;
    if (retained) topic.value = value;
    const routes = this.routes.get(alias);
    if (routes) {
      const event = topicEvent('value', topic, value, { retained });
      for (const sub of routes) sub.put(event);
    }
  }

  /** A delta that does not apply: no guessing; the topic's value is fetched and becomes the basis. */
  deltaFailed(alias, topic, error) {
    this.deltasFailed += 1;
    topic.basis = null; // later deltas cannot apply either, until a value comes
    this.send('fetch', ['>' + topic.path, true, false, null, 1]).then((rows) => {
      const row = rows.find((r) => r[0] === topic.path);
      if (!row || !(row[3] instanceof Uint8Array) || this.aliases.get(alias) !== topic || topic.basis !== null) return;
      topic.basis = row[3];
      this.value(alias, topic, row[3], true);
    }, (e) => this.errors.push(e));
    this.errors.push(new InvalidValueError(`a delta for ${topic.path} did not apply (${error.message}); fetching its value`));
  }

  decode(spec, data) {
    if (spec.type === 'TIME_SERIES') return data;
    try {
      return decodeValue(spec.type, data);
    } catch (e) {
      this.errors.push(new InvalidValueError(`a value the server sent cannot be decoded: ${e.message}`));
      return undefined;
    }
  }

  subscribed(m) {
    const [, alias, path, type, props, data] = m;
    const spec = { type, properties: Object.fromEntries(props) };
    const value = data instanceof Uint8Array ? this.decode(spec, data) ?? null : null;
    const topic = { path, spec, value, sequence: -1, basis: data instanceof Uint8Array ? data : null };
    this.aliases.set(alias, topic);
    this.route(alias, path);
    const old = this.known.get(path);
    this.known.set(path, topic);
    const resync = this.resync;
    if (!old) {
      this.fanOut(topicEvent('subscribed', topic, value));
    } else if (old.spec.type !== spec.type || JSON.stringify(old.spec.properties) !== JSON.stringify(spec.properties)) {
      this.fanOut(topicEvent('unsubscribed', old, null, { reason: 'REMOVED' }));
      this.fanOut(topicEvent('subscribed', topic, value));
    } else if (type === 'TIME_SERIES') {
      if (resync && resync.previous.get(alias) === old) topic.sequence = old.sequence;
    } else if (value !== null) {
      this.fanOut(topicEvent('value', topic, value));
    }
    if (resync) {
      resync.seen.add(path);
      if (resync.resumed) this.refreshed(resync);
    }
  }

  refreshed(resync) {
    resync.remaining -= 1;
    if (resync.remaining <= 0) this.resynced(resync);
  }

  timeSeriesEvent(m) {
    const [, alias, sequence, timestamp, author, data, oSeq, oTime, oAuthor] = m;
    const topic = this.aliases.get(alias);
    if (!topic || topic.spec.type !== 'TIME_SERIES' || sequence <= topic.sequence) return;
    let value;
    try {
      value = decodeValue(eventType(topic.spec), data);
    } catch (e) {
      this.errors.push(new InvalidValueError(`an event the server sent cannot be decoded: ${e.message}`));
      return;
    }
    const original = oSeq === null || oSeq === undefined ? null : { sequence: oSeq, timestamp: oTime ?? 0, author: oAuthor ?? '' };
    topic.value = value;
    topic.sequence = sequence;
    const routes = this.routes.get(alias);
    if (routes) {
      const event = topicEvent('value', topic, value, { event: { sequence, timestamp, author, value, original } });
      for (const sub of routes) sub.put(event);
    }
  }

  route(alias, path) {
    const subs = this.subscriptions.filter((s) => s.matches(path));
    this.routes.set(alias, subs.length || !this.unrequested ? subs : [this.unrequested]);
  }

  reroute() {
    for (const [alias, topic] of this.aliases) this.route(alias, topic.path);
  }

  fanOut(event) {
    let matched = false;
    for (const sub of this.subscriptions) {
      if (sub.matches(event.path)) {
        matched = true;
        sub.put(event);
      }
    }
    if (!matched && this.unrequested) this.unrequested.put(event);
  }

  endSubscription(sub) {
    const i = this.subscriptions.indexOf(sub);
    if (i >= 0) this.subscriptions.splice(i, 1);
    sub.ended = true;
  }

  async subscribe(selector, callback) {
    if (typeof callback !== 'function') throw new InvalidRequestError('subscribe needs a callback function');
    const sub = new Subscription(this, selector, callback);
    // topics this session already receives through another selector are not announced again
    for (const topic of this.known.values()) {
      if (sub.matches(topic.path)) sub.put(topicEvent('subscribed', topic, topic.value));
    }
    this.subscriptions.push(sub);
    this.reroute();
    try {
      await this.sendAgain('subscribe', [selector]);
    } catch (e) {
      this.endSubscription(sub);
      this.reroute();
      throw e;
    }
    return sub;
  }
}

// -- the operations, grouped as the Python client groups them -------------------------------------

class Topics {
  constructor(s) { this.s = s; }

  /** Add a topic: resolves to 'CREATED' or 'EXISTS' (the same specification was there). */
  add(path, type, properties = null) {
    return this.s.request('add', path, String(type), properties);
  }

  /** Set a topic's value; resolves once the partition applied it. */
  set(path, value, { type = null, addIfMissing = false, retain = true } = {}) {
    let data;
    let raw;
    try {
      [data, raw] = encodeValue(value, type);
    } catch (e) {
      return Promise.reject(e);
    }
    const args = [path, data, raw, type, addIfMissing];
    if (!retain) args.push(false);
    return this.s.send('set', args, () => undefined);
  }

  /** Set the value, creating the topic (of `type`, or inferred from the value) if missing. */
  addAndSet(path, value, type = null) {
    return this.set(path, value, { type, addIfMissing: true });
  }

  /** Remove the topics `selector` selects; resolves to how many went. */
  remove(selector) { return this.s.request('remove', selector); }

  fetch(selector, { withValues = true, withProperties = false, types = null, limit = null } = {}) {
    return this.s.send('fetch', [selector, withValues, withProperties, types, limit], (rows) => rows.map(
      ([path, type, props, data, evType]) => ({
        path,
        type,
        value: data == null ? null : decodeValue(evType || type, data),
        properties: props == null ? null : Object.fromEntries(Array.isArray(props) ? props : Object.entries(props)),
      })));
  }

  /** Subscribe: `callback` gets every event (see the module's comment); resolves to the subscription. */
  subscribe(selector, callback) { return this.s.subscribe(selector, callback); }

  /**
   * Topics this session receives that none of its own subscriptions match: those another session
   * subscribed it to (client control). `callback` gets their events; one at a time (a second call
   * replaces the first); `close()` stops it. Without one they are kept and replayed to a later
   * subscription that matches.
   */
  unrequested(callback) {
    if (typeof callback !== 'function') throw new InvalidRequestError('unrequested needs a callback function');
    const s = this.s;
    if (s.unrequested) s.unrequested.ended = true;
    const catchAll = {
      ended: false,
      put(event) {
        if (this.ended) return;
        try { callback(event); } catch (e) { reportCallbackError(e); }
      },
      close() {
        this.ended = true;
        if (s.unrequested === catchAll) {
          s.unrequested = null;
          s.reroute();
        }
      },
    };
    s.unrequested = catchAll;
    for (const topic of s.known.values()) {
      if (!s.subscriptions.some((x) => x.matches(topic.path))) catchAll.put(topicEvent('subscribed', topic, topic.value));
    }
    s.reroute();
    return catchAll;
  }

  async unsubscribe(selector) {
    await this.s.sendAgain('unsubscribe', [selector]);
    for (const sub of this.s.subscriptions.filter((x) => x.selector === selector)) this.s.endSubscription(sub);
    this.s.reroute();
  }
}

const ANCHORS = new Set(['start', 'sequence', 'time', 'last', 'last_millis']);
const SPANS = new Set(['end', 'to_sequence', 'to_time', 'next', 'next_millis', 'until_last', 'until_last_millis',
  'previous', 'previous_millis', 'to_start']);
const RANGE_VIEWS = new Set(['values', 'latest_edits', 'all_edits']);

function eventOf([sequence, timestamp, author, data, oSeq, oTime, oAuthor], type) {
  const original = oSeq == null ? null : { sequence: oSeq, timestamp: oTime, author: oAuthor };
  return { sequence, timestamp, author, value: decodeValue(type, data), original };
}

function metadata([sequence, timestamp, author]) {
  return { sequence, timestamp, author };
}

class TimeSeries {
  constructor(s) { this.s = s; }

  /** Append an event (its value is checked against the series' event type by the server). */
  append(path, value, { timestamp = null } = {}) {
    let encoded;
    try { encoded = encodeValue(value); } catch (e) { return Promise.reject(e); }
    return this.s.send('append', [path, encoded[0], encoded[1], timestamp], metadata);
  }

  /** Edit a retained event; resolves to the edit event's own metadata. */
  edit(path, originalSequence, value) {
    let encoded;
    try { encoded = encodeValue(value); } catch (e) { return Promise.reject(e); }
    return this.s.send('edit', [path, originalSequence, encoded[0], encoded[1]], metadata);
  }

  /**
   * Events of a series: `anchor` ('start' (default), 'sequence', 'time', 'last', 'last_millis') with
   * `anchorValue`, `span` ('end' (default), 'to_sequence', 'to_time', 'next', 'next_millis',
   * 'until_last', 'until_last_millis', 'previous', 'previous_millis', 'to_start') with `spanValue`,
   * `view` ('values' (default), 'latest_edits', 'all_edits'), `limit`. Resolves to {events, selected}.
   */
  rangeQuery(path, { anchor = 'start', anchorValue = 0, span = 'end', spanValue = 0, view = 'values', limit = null } = {}) {
    if (!ANCHORS.has(anchor)) return Promise.reject(new InvalidQueryError(`unknown anchor ${JSON.stringify(anchor)}`));
    if (!SPANS.has(span)) return Promise.reject(new InvalidQueryError(`unknown span ${JSON.stringify(span)}`));
    if (!RANGE_VIEWS.has(view)) return Promise.reject(new InvalidQueryError(`unknown view ${JSON.stringify(view)}`));
    return this.s.send('range_query', [path, anchor, anchorValue, span, spanValue, view, limit],
      ([selected, rows, type]) => ({ selected, events: rows.map((r) => eventOf(r, type)) }));
  }
}

class Views {
  constructor(s) { this.s = s; }

  /** Create a view, or replace the view of that name; a bad specification rejects with VIEW_SYNTAX or INVALID_VIEW. */
  create(name, specification) { return this.s.request('view_create', name, specification); }

  /** Every view in evaluation (creation) order, each with its `state` ('active', or why not). */
  list() { return this.s.request('view_list'); }

  remove(name) { return this.s.send('view_remove', [name], () => undefined); }
}

function target(which) {
  const { sessionId, filter } = which ?? {};
  if ((sessionId === undefined) === (filter === undefined)) {
    throw new InvalidRequestError('name exactly one of sessionId and filter');
  }
  return sessionId !== undefined ? ['id', sessionId] : ['filter', filter];
}

class Sessions {
  constructor(s) { this.s = s; }

  /** {sessionId: properties} of one session ({sessionId}) or those a filter selects ({filter}). */
  getProperties(which) {
    try { return this.s.request('session_get', target(which)); } catch (e) { return Promise.reject(e); }
  }

  /** Change user properties (null removes one); resolves to how many sessions changed. */
  setProperties(properties, which) {
    for (const [k, v] of Object.entries(properties ?? {})) {
      if (typeof v !== 'string' && v !== null) {
        return Promise.reject(new InvalidPropertiesError(`property ${k}: a value must be a string or null`));
      }
    }
    try { return this.s.request('session_set', target(which), properties); } catch (e) { return Promise.reject(e); }
  }

  /** Close other sessions ({sessionId} or {filter}); resolves to how many were closed. */
  close(which) {
    try { return this.s.request('session_close', target(which)); } catch (e) { return Promise.reject(e); }
  }
}

class Security {
  constructor(s) { this.s = s; }

  get() { return this.s.request('security_get'); }

  /** Apply security commands (see sessions/security.py); resolves to the new version. */
  update(...commands) { return this.s.request('security_update', commands); }
}

class SessionTrees {
  constructor(s) { this.s = s; }

  putTable(branch, mappings) { return this.s.request('tree_put', branch, mappings); }

  getTable(branch) { return this.s.request('tree_get', branch); }

  listTables() {
    return this.s.send('tree_list', [], (tables) => (Array.isArray(tables)
      ? Object.fromEntries(tables.map((t) => [t[0], t[1]]))
      : tables));
  }

  removeTable(branch) { return this.s.request('tree_remove', branch); }
}

class Server {
  constructor(s) { this.s = s; }

  /** What `canopy cluster status --json` prints. */
  clusterStatus() { return this.s.request('cluster_status'); }
}

/** Metric collectors: labelled series every gateway exports on its /metrics (CONTROL_SERVER to put
 * and remove, VIEW_SERVER to list). A bad definition rejects with INVALID_COLLECTOR. */
class Metrics {
  constructor(s) { this.s = s; }

  /** Count the topics `selector` selects and the subscriptions to them (by type with groupByType). */
  putTopicCollector(name, selector, { groupByType = false } = {}) {
    return this.s.request('collector_put', { kind: 'topic', name, selector, group_by_type: groupByType });
  }

  /** Count the sessions `filter` matches, one series per value of the `groupBy` session properties. */
  putSessionCollector(name, filter, { groupBy = [], removeMetricsWithNoMatches = false } = {}) {
    return this.s.request('collector_put', {
      kind: 'session', name, filter, group_by: groupBy, remove_metrics_with_no_matches: removeMetricsWithNoMatches,
    });
  }

  listCollectors() { return this.s.request('collector_list'); }

  removeCollector(name) { return this.s.request('collector_remove', name); }
}

class HandlerRegistration {
  constructor(owner, token, path, handler) {
    this.owner = owner;
    this.token = token;
    this.path = path;
    this.handler = handler;
    this.closed = false;
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.owner.byToken.delete(this.token);
    if (!this.owner.s.closed) {
      try {
        await this.owner.s.request('missing_topic_rm', this.token);
      } catch (e) {
        if (!(e instanceof ConnectionInterruptedError) && e.code !== 'INVALID_REQUEST') throw e;
      }
    }
  }
}

class MissingTopics {
  constructor(s) {
    this.s = s;
    this.byToken = new Map();
  }

  /**
   * Register `handler` for `path`: it hears of subscriptions and fetches under `path` that match
   * no topic, and answers true (or undefined) to let them proceed, false to cancel them (it may
   * return a promise). A handler that throws counts as proceed.
   */
  async addHandler(path, handler) {
    const token = await this.s.request('missing_topic_add', path);
    const registration = new HandlerRegistration(this, token, path, handler);
    this.byToken.set(token, registration);
    return registration;
  }

  /** Every registration of the server: [registration, path, sessionId]. */
  list() { return this.s.request('missing_topic_list'); }

  async notified(body) {
    if (body === null || typeof body !== 'object') return;
    const registration = this.byToken.get(body.registration);
    const notification = {
      id: String(body.id), selector: String(body.selector), sessionId: String(body.session_id),
      properties: body.properties ?? {}, servers: body.servers ?? [], path: String(body.path),
    };
    let answer = true;
    if (registration && !registration.closed) {
      try {
        answer = await registration.handler(notification);
      } catch {
        answer = true;
      }
    }
    if (!this.s.closed) {
      this.s.request('missing_topic_ans', notification.id, answer === false ? 'cancel' : 'proceed').catch(() => {});
    }
  }

  registerAgain() {
    const old = this.byToken;
    this.byToken = new Map();
    for (const registration of old.values()) {
      if (registration.closed) continue;
      this.s.request('missing_topic_add', registration.path).then((token) => {
        registration.token = token;
        this.byToken.set(token, registration);
      }, (e) => this.s.errors.push(e));
    }
  }
}

// -- connecting -----------------------------------------------------------------------------------

export const DEFAULT_URL = 'ws://127.0.0.1:8080';

function seconds(name, value, fallback) {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !(value >= 0)) throw new InvalidRequestError(`${name} must be a number of seconds, at least 0; got ${value}`);
  return value;
}

/**
 * Open a session on the first of `url` (one URL or an array) that takes it. Options: principal,
 * password, properties ({name: value} strings), reconnectTimeout (s, default 60; 0 never
 * reconnects), retryDelay (s, default 0.5), timeout (s per attempt, default 10), WebSocket (a
 * WebSocket class to use instead of the platform's).
 */
export async function connect(url = DEFAULT_URL, options = {}) {
  const urls = Array.isArray(url) ? [...url] : [url];
  if (!urls.length || !urls.every((u) => typeof u === 'string')) throw new InvalidRequestError('url must be a URL or a non-empty array of URLs');
  const { principal = null, password = null, properties = {} } = options;
  for (const [k, v] of Object.entries(properties)) {
    if (typeof v !== 'string') throw new InvalidPropertiesError(`session property ${k}: values must be strings`);
  }
  const dialer = {
    urls,
    reconnectTimeout: seconds('reconnectTimeout', options.reconnectTimeout, 60),
    retryDelay: seconds('retryDelay', options.retryDelay, 0.5),
    timeout: seconds('timeout', options.timeout, 10),
    WebSocket: await webSocketClass(options.WebSocket),
    hello: (resume = null) => msgpack.frame([msgpack.encode([P.HELLO, P.PROTOCOL_VERSION, principal, password, properties, resume, { deltas: true }])]),
  };
  dialer.hello(); // a HELLO that cannot be encoded never leaves
  let failure = null;
  for (const u of urls) {
    try {
      const opened = await dial(dialer.WebSocket, u, dialer.hello(), dialer.timeout * 1000);
      return new Session(dialer, u, opened);
    } catch (e) {
      if (!(e instanceof ConnectError)) throw e;
      failure = e;
    }
  }
  if (urls.length > 1) throw new ConnectError(`none of ${urls.length} URLs answered; the last: ${failure.message}`);
  throw failure;
}
