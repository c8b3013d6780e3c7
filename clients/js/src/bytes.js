// Growing byte buffers and bounded readers, shared by the msgpack and CBOR codecs.

/** Bytes appended at `pos`, the buffer doubling as it fills. */
export class ByteWriter {
  constructor(size = 64) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
    this.pos = 0;
  }

  ensure(n) {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(v) { this.ensure(1); this.buf[this.pos++] = v; }
  bytes(b) { this.ensure(b.length); this.buf.set(b, this.pos); this.pos += b.length; }
  result() { return this.buf.slice(0, this.pos); }
}

/** Bytes read from `pos`; reading past the end throws `new Failure('truncated <what> at byte N')`. */
export class ByteReader {
  constructor(bytes, Failure, what) {
    this.buf = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
    this.Failure = Failure;
    this.what = what;
  }

  need(n) {
    if (this.pos + n > this.buf.length) throw new this.Failure(`truncated ${this.what} at byte ${this.pos}`);
  }
}
