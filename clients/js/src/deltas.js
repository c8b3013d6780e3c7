// Applying the binary deltas of delta streaming (docs/PROTOCOL.md, "Delta streaming"): a DELTA
// turns the value the client was last sent for a topic (its basis) into the new value. Anything
// wrong with one — another version, a basis of another length, an operation outside the basis,
// a length or CRC-32 that does not match — throws DeltaError, and the session fetches the value.

export class DeltaError extends Error {}

const VERSION = 1;
const INSERT = 0;
const COPY = 1;

let crcTable = null;

function crc32(bytes) {
  if (crcTable === null) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n += 1) {
      let c = n;
      for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i += 1) crc = crcTable[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** One unsigned LEB128 number at `at`: [value, the offset after it]. */
function varint(delta, at) {
  let n = 0;
  let scale = 1;
  for (;;) {
    if (at >= delta.length) throw new DeltaError(`truncated delta: a number runs past its end (byte ${at})`);
    const byte = delta[at];
    at += 1;
    n += (byte & 0x7f) * scale;
    if (!(byte & 0x80)) return [n, at];
    scale *= 128;
    if (scale > 2 ** 53) throw new DeltaError(`malformed delta: a number too large (byte ${at})`);
  }
}

/** The value `delta` makes from `basis` (both Uint8Array). */
export function applyDelta(delta, basis) {
  if (!(delta instanceof Uint8Array) || delta.length === 0) throw new DeltaError('empty delta');
  if (delta[0] !== VERSION) throw new DeltaError(`delta version ${delta[0]}, not ${VERSION}`);
  let [sourceLength, at] = varint(delta, 1);
  let targetLength;
  [targetLength, at] = varint(delta, at);
  if (sourceLength !== basis.length) {
    throw new DeltaError(`the delta is for a basis of ${sourceLength} bytes, not ${basis.length}`);
  }
  if (at + 4 > delta.length) throw new DeltaError('truncated delta: no checksum');
  const crc = ((delta[at] << 24) | (delta[at + 1] << 16) | (delta[at + 2] << 8) | delta[at + 3]) >>> 0;
  at += 4;
  if (targetLength > 64 * 1024 * 1024) throw new DeltaError(`the delta announces ${targetLength} bytes`);
  const out = new Uint8Array(targetLength);
  let size = 0;
  while (at < delta.length) {
    const op = delta[at];
    at += 1;
    let chunk;
    if (op === INSERT) {
      let length;
      [length, at] = varint(delta, at);
      if (at + length > delta.length) throw new DeltaError(`truncated delta: an insert of ${length} bytes at byte ${at}`);
      chunk = delta.subarray(at, at + length);
      at += length;
    } else if (op === COPY) {
      let offset;
      let length;
      [offset, at] = varint(delta, at);
      [length, at] = varint(delta, at);
      if (offset + length > basis.length) {
        throw new DeltaError(`a copy of ${length} bytes from ${offset} runs past the basis's ${basis.length}`);
      }
      chunk = basis.subarray(offset, offset + length);
    } else {
      throw new DeltaError(`unknown delta operation ${op} at byte ${at - 1}`);
    }
    if (size + chunk.length > targetLength) {
      throw new DeltaError(`the delta makes more than the ${targetLength} bytes it announces`);
    }
    out.set(chunk, size);
    size += chunk.length;
  }
  if (size !== targetLength) throw new DeltaError(`the delta makes ${size} bytes, not the ${targetLength} it announces`);
  if (crc32(out) !== crc) throw new DeltaError('the delta\'s result fails its checksum: it was made for another basis');
  return out;
}
