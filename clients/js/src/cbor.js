// CBOR (RFC 8949) for topic values: canopy stores a STRING, INT64, DOUBLE or JSON value as one
// CBOR data item. Only what those values hold: null, booleans, integers (BigInt beyond 2^53),
// floats (half, single and double read; double written), text, arrays and maps with text keys.
// Byte strings decode to Uint8Array; tags 2 and 3 (big integers) decode to BigInt; any other
// tag, undefined, simple values and indefinite lengths are refused.

import { ByteReader, ByteWriter } from './bytes.js';

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder('utf-8', { fatal: true });

/** How deep a value may nest arrays and maps (the server's limit for JSON values is 64). */
export const MAX_DEPTH = 64;

export class CborError extends Error {}

class Writer extends ByteWriter {
  head(major, n) {
    // n: a non-negative Number (safe integer) or BigInt below 2^64
    const m = major << 5;
    if (typeof n === 'bigint') {
      if (n <= 0xffffffffn) return this.head(major, Number(n));
      this.ensure(9); this.buf[this.pos++] = m | 27; this.view.setBigUint64(this.pos, n); this.pos += 8;
      return;
    }
    if (n < 24) { this.ensure(1); this.buf[this.pos++] = m | n; return; }
    if (n < 0x100) { this.ensure(2); this.buf[this.pos++] = m | 24; this.buf[this.pos++] = n; return; }
    if (n < 0x10000) { this.ensure(3); this.buf[this.pos++] = m | 25; this.view.setUint16(this.pos, n); this.pos += 2; return; }
    if (n < 0x100000000) { this.ensure(5); this.buf[this.pos++] = m | 26; this.view.setUint32(this.pos, n); this.pos += 4; return; }
    this.head(major, BigInt(n));
  }

  float64(v) { this.ensure(9); this.buf[this.pos++] = 0xfb; this.view.setFloat64(this.pos, v); this.pos += 8; }
}

const U64_MAX = 0xffffffffffffffffn;

function writeInteger(w, v) {
  const big = typeof v === 'bigint';
  if (big ? v >= 0n : v >= 0) {
    if (big && v > U64_MAX) throw new CborError(`integer ${v} is outside CBOR's 64 bits`);
    return w.head(0, v);
  }
  const n = big ? -1n - v : -1 - v;
  if (big && n > U64_MAX) throw new CborError(`integer ${v} is outside CBOR's 64 bits`);
  return w.head(1, n);
}

function write(w, value, depth, where) {
  if (depth > MAX_DEPTH) throw new CborError(`the value nests arrays and objects deeper than ${MAX_DEPTH} levels`);
  if (value === null || value === undefined) { w.ensure(1); w.buf[w.pos++] = 0xf6; return; }
  switch (typeof value) {
    case 'boolean': w.ensure(1); w.buf[w.pos++] = value ? 0xf5 : 0xf4; return;
    case 'bigint': writeInteger(w, value); return;
    case 'number':
      if (Number.isSafeInteger(value) && !Object.is(value, -0)) writeInteger(w, value);
      else w.float64(value);
      return;
    case 'string': {
      const b = textEncoder.encode(value);
      w.head(3, b.length);
      w.bytes(b);
      return;
    }
    default: break;
  }
  if (value instanceof Uint8Array) { w.head(2, value.length); w.bytes(value); return; }
  if (Array.isArray(value)) {
    w.head(4, value.length);
    value.forEach((item, i) => write(w, item, depth + 1, `${where}[${i}]`));
    return;
  }
  if (typeof value === 'object' && (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined);
    w.head(5, keys.length);
    for (const k of keys) {
      write(w, k, depth + 1, where);
      write(w, value[k], depth + 1, `${where}.${k}`);
    }
    return;
  }
  const kind = typeof value === 'object' ? (value.constructor?.name ?? 'object') : typeof value;
  throw new CborError(`cannot encode a ${kind} at ${where || 'the top'}: values are null, booleans, numbers, strings, arrays and plain objects`);
}

/** One CBOR data item for `value`. */
export function encode(value) {
  const w = new Writer();
  write(w, value, 0, '');
  return w.result();
}

function half(bits) {
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  const sign = bits & 0x8000 ? -1 : 1;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

class Reader extends ByteReader {
  constructor(bytes) { super(bytes, CborError, 'CBOR'); }

  argument(info) {
    if (info < 24) return info;
    let v;
    switch (info) {
      case 24: this.need(1); return this.buf[this.pos++];
      case 25: this.need(2); v = this.view.getUint16(this.pos); this.pos += 2; return v;
      case 26: this.need(4); v = this.view.getUint32(this.pos); this.pos += 4; return v;
      case 27: this.need(8); v = this.view.getBigUint64(this.pos); this.pos += 8; return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      default: throw new CborError(`${info === 31 ? 'indefinite lengths are' : `additional information ${info} is`} not supported (byte ${this.pos - 1})`);
    }
  }

  length(info) {
    const n = this.argument(info);
    if (typeof n === 'bigint' || n > this.buf.length - this.pos + 1) throw new CborError(`a length of ${n} exceeds the data at byte ${this.pos}`);
    return n;
  }
}

function big(bytes) {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  return n;
}

function read(r, depth) {
  if (depth > MAX_DEPTH) throw new CborError(`the value nests arrays and maps deeper than ${MAX_DEPTH} levels`);
  r.need(1);
  const initial = r.buf[r.pos++];
  const major = initial >> 5;
  const info = initial & 0x1f;
  switch (major) {
    case 0: return r.argument(info);
    case 1: {
      const n = r.argument(info);
      if (typeof n === 'bigint') { const v = -1n - n; return v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v; }
      return -1 - n;
    }
    case 2: { const n = r.length(info); r.need(n); const b = r.buf.slice(r.pos, r.pos + n); r.pos += n; return b; }
    case 3: {
      const n = r.length(info);
      r.need(n);
      const start = r.pos;
      r.pos += n;
      try {
        return textDecoder.decode(r.buf.subarray(start, start + n));
      } catch {
        throw new CborError(`a text string is not valid UTF-8 at byte ${start}`);
      }
    }
    case 4: {
      const n = r.length(info);
      const out = new Array(n);
      for (let i = 0; i < n; i++) out[i] = read(r, depth + 1);
      return out;
    }
    case 5: {
      const n = r.length(info);
      const out = {};
      for (let i = 0; i < n; i++) {
        const key = read(r, depth + 1);
        if (typeof key !== 'string') throw new CborError(`a map key is not text at byte ${r.pos}`);
        if (Object.prototype.hasOwnProperty.call(out, key)) throw new CborError(`the key ${JSON.stringify(key)} appears twice in a map`);
        Object.defineProperty(out, key, { value: read(r, depth + 1), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    case 6: {
      const tag = r.argument(info);
      if (tag === 2 || tag === 3) {
        const bytes = read(r, depth + 1);
        if (!(bytes instanceof Uint8Array)) throw new CborError('a big integer tag must hold a byte string');
        return tag === 2 ? big(bytes) : -1n - big(bytes);
      }
      throw new CborError(`CBOR tag ${tag} is not supported (byte ${r.pos})`);
    }
    default: {
      let v;
      switch (info) {
        case 20: return false;
        case 21: return true;
        case 22: return null;
        case 25: r.need(2); v = half(r.view.getUint16(r.pos)); r.pos += 2; return v;
        case 26: r.need(4); v = r.view.getFloat32(r.pos); r.pos += 4; return v;
        case 27: r.need(8); v = r.view.getFloat64(r.pos); r.pos += 8; return v;
        default: throw new CborError(`simple value ${info} is not supported (byte ${r.pos - 1})`);
      }
    }
  }
}

/** The value of one CBOR data item filling all of `bytes`. */
export function decode(bytes) {
  if (!bytes.length) throw new CborError('empty value: expected one CBOR data item');
  const r = new Reader(bytes);
  const value = read(r, 0);
  if (r.pos !== bytes.length) throw new CborError(`${bytes.length - r.pos} trailing bytes after the CBOR data item`);
  return value;
}

/** Whether `bytes` hold a CBOR float (half, single or double). */
export function isFloat(bytes) {
  return bytes.length > 0 && (bytes[0] === 0xf9 || bytes[0] === 0xfa || bytes[0] === 0xfb);
}
