// msgpack (https://github.com/msgpack/msgpack/blob/master/spec.md): the frames of canopy's wire
// protocol. Only what the protocol carries: nil, booleans, integers (64-bit ones as BigInt when
// they do not fit a Number exactly), float 64, strings, binaries (Uint8Array), arrays and maps
// (plain objects; keys are strings). Extension types are refused.

import { ByteReader, ByteWriter } from './bytes.js';

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder('utf-8', { fatal: true });

/** How deep decoded arrays and maps may nest (the server's msgpack stops at 1024). */
export const MAX_DEPTH = 1024;

export class MsgpackError extends Error {}

class Writer extends ByteWriter {
  u16(v) { this.ensure(2); this.view.setUint16(this.pos, v); this.pos += 2; }
  u32(v) { this.ensure(4); this.view.setUint32(this.pos, v); this.pos += 4; }
}

function writeInt(w, v) {
  // v: a safe integer Number or a BigInt within int64/uint64
  if (typeof v === 'number') {
    if (v >= 0) {
      if (v < 0x80) return w.u8(v);
      if (v < 0x100) { w.u8(0xcc); return w.u8(v); }
      if (v < 0x10000) { w.u8(0xcd); return w.u16(v); }
      if (v < 0x100000000) { w.u8(0xce); return w.u32(v); }
      return writeInt(w, BigInt(v));
    }
    if (v >= -32) return w.u8(v & 0xff);
    if (v >= -128) { w.u8(0xd0); w.ensure(1); w.view.setInt8(w.pos, v); w.pos += 1; return undefined; }
    if (v >= -32768) { w.u8(0xd1); w.ensure(2); w.view.setInt16(w.pos, v); w.pos += 2; return undefined; }
    if (v >= -2147483648) { w.u8(0xd2); w.ensure(4); w.view.setInt32(w.pos, v); w.pos += 4; return undefined; }
    return writeInt(w, BigInt(v));
  }
  if (v >= 0n) {
    if (v <= 0xffffffffn) return writeInt(w, Number(v));
    if (v > 0xffffffffffffffffn) throw new MsgpackError(`integer ${v} is outside the 64-bit range`);
    w.u8(0xcf); w.ensure(8); w.view.setBigUint64(w.pos, v); w.pos += 8;
    return undefined;
  }
  if (v >= -2147483648n) return writeInt(w, Number(v));
  if (v < -0x8000000000000000n) throw new MsgpackError(`integer ${v} is outside the 64-bit range`);
  w.u8(0xd3); w.ensure(8); w.view.setBigInt64(w.pos, v); w.pos += 8;
  return undefined;
}

function writeLength(w, n, fix, fixMax, c8, c16, c32) {
  if (fix !== null && n <= fixMax) return w.u8(fix | n);
  if (c8 !== null && n < 0x100) { w.u8(c8); return w.u8(n); }
  if (n < 0x10000) { w.u8(c16); return w.u16(n); }
  w.u8(c32); return w.u32(n);
}

function write(w, value, depth) {
  if (depth > MAX_DEPTH) throw new MsgpackError(`arrays and maps nest deeper than ${MAX_DEPTH} levels`);
  if (value === null || value === undefined) return w.u8(0xc0);
  switch (typeof value) {
    case 'boolean': return w.u8(value ? 0xc3 : 0xc2);
    case 'bigint': return writeInt(w, value);
    case 'number':
      if (Number.isSafeInteger(value) && !Object.is(value, -0)) return writeInt(w, value);
      w.u8(0xcb); w.ensure(8); w.view.setFloat64(w.pos, value); w.pos += 8;
      return undefined;
    case 'string': {
      const b = textEncoder.encode(value);
      writeLength(w, b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
      return w.bytes(b);
    }
    default: break;
  }
  if (value instanceof Uint8Array) {
    writeLength(w, value.length, null, 0, 0xc4, 0xc5, 0xc6);
    return w.bytes(value);
  }
  if (value instanceof ArrayBuffer) return write(w, new Uint8Array(value), depth);
  if (Array.isArray(value)) {
    writeLength(w, value.length, 0x90, 15, null, 0xdc, 0xdd);
    for (const item of value) write(w, item, depth + 1);
    return undefined;
  }
  if (value instanceof Map) {
    writeLength(w, value.size, 0x80, 15, null, 0xde, 0xdf);
    for (const [k, v] of value) { write(w, k, depth + 1); write(w, v, depth + 1); }
    return undefined;
  }
  if (typeof value === 'object') {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined);
    writeLength(w, keys.length, 0x80, 15, null, 0xde, 0xdf);
    for (const k of keys) { write(w, k, depth + 1); write(w, value[k], depth + 1); }
    return undefined;
  }
  throw new MsgpackError(`cannot encode a ${typeof value}`);
}

/** The msgpack encoding of `value`. */
export function encode(value) {
  const w = new Writer();
  write(w, value, 0);
  return w.result();
}

/** A frame from messages already encoded (one array header and the messages' bytes). */
export function frame(encodedMessages) {
  const w = new Writer(encodedMessages.reduce((n, m) => n + m.length, 5));
  writeLength(w, encodedMessages.length, 0x90, 15, null, 0xdc, 0xdd);
  for (const m of encodedMessages) w.bytes(m);
  return w.result();
}

class Reader extends ByteReader {
  constructor(bytes) { super(bytes, MsgpackError, 'data'); }

  u8() { this.need(1); return this.buf[this.pos++]; }
  u16() { this.need(2); const v = this.view.getUint16(this.pos); this.pos += 2; return v; }
  u32() { this.need(4); const v = this.view.getUint32(this.pos); this.pos += 4; return v; }
  take(n) { this.need(n); const b = this.buf.subarray(this.pos, this.pos + n); this.pos += n; return b; }
}

function int64(big) {
  return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

function readStr(r, n) {
  try {
    return textDecoder.decode(r.take(n));
  } catch (e) {
    if (e instanceof MsgpackError) throw e;
    throw new MsgpackError(`a string is not valid UTF-8 at byte ${r.pos - n}`);
  }
}

function readArray(r, n, depth) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = read(r, depth + 1);
  return out;
}

function readMap(r, n, depth) {
  const out = {};
  for (let i = 0; i < n; i++) {
    const key = read(r, depth + 1);
    if (typeof key !== 'string') throw new MsgpackError(`a map key is not a string at byte ${r.pos}`);
    const value = read(r, depth + 1);
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function read(r, depth) {
  if (depth > MAX_DEPTH) throw new MsgpackError(`arrays and maps nest deeper than ${MAX_DEPTH} levels`);
  const b = r.u8();
  if (b < 0x80) return b;
  if (b >= 0xe0) return b - 0x100;
  if (b >= 0xa0 && b <= 0xbf) return readStr(r, b & 0x1f);
  if (b >= 0x90 && b <= 0x9f) return readArray(r, b & 0x0f, depth);
  if (b >= 0x80 && b <= 0x8f) return readMap(r, b & 0x0f, depth);
  let v;
  switch (b) {
    case 0xc0: return null;
    case 0xc2: return false;
    case 0xc3: return true;
    case 0xc4: return r.take(r.u8()).slice();
    case 0xc5: return r.take(r.u16()).slice();
    case 0xc6: return r.take(r.u32()).slice();
    case 0xca: r.need(4); v = r.view.getFloat32(r.pos); r.pos += 4; return v;
    case 0xcb: r.need(8); v = r.view.getFloat64(r.pos); r.pos += 8; return v;
    case 0xcc: return r.u8();
    case 0xcd: return r.u16();
    case 0xce: return r.u32();
    case 0xcf: r.need(8); v = r.view.getBigUint64(r.pos); r.pos += 8; return int64(v);
    case 0xd0: r.need(1); v = r.view.getInt8(r.pos); r.pos += 1; return v;
    case 0xd1: r.need(2); v = r.view.getInt16(r.pos); r.pos += 2; return v;
    case 0xd2: r.need(4); v = r.view.getInt32(r.pos); r.pos += 4; return v;
    case 0xd3: r.need(8); v = r.view.getBigInt64(r.pos); r.pos += 8; return int64(v);
    case 0xd9: return readStr(r, r.u8());
    case 0xda: return readStr(r, r.u16());
    case 0xdb: return readStr(r, r.u32());
    case 0xdc: return readArray(r, r.u16(), depth);
    case 0xdd: return readArray(r, r.u32(), depth);
    case 0xde: return readMap(r, r.u16(), depth);
    case 0xdf: return readMap(r, r.u32(), depth);
    default: throw new MsgpackError(`unsupported msgpack type 0x${b.toString(16)} at byte ${r.pos - 1}`);
  }
}

/** Decode one msgpack item filling all of `bytes` (a Uint8Array). */
export function decode(bytes) {
  const r = new Reader(bytes);
  const value = read(r, 0);
  if (r.pos !== bytes.length) throw new MsgpackError(`${bytes.length - r.pos} bytes after the item`);
  return value;
}
