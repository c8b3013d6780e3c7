// canopy's wire protocol, version 3: the constants both ends agree on. docs/PROTOCOL.md describes
// it (generated from canopy/protocol.py); test/protocol.test.js checks these against that document.

export const PROTOCOL_VERSION = 3;

export const HELLO = 0;
export const WELCOME = 1;
export const REQUEST = 2;
export const RESPONSE = 3;
export const ERROR = 4;
export const SUBSCRIBED = 5;
export const VALUE = 6;
export const UNSUBSCRIBED = 7;
export const CLOSE = 8;
export const EVENT = 9;
export const NOTIFY = 10;
export const DELTA = 11;
export const COMPRESSED = 12;

/** Each message type's fields, after its code (how many a message of that type has). */
export const FIELDS = {
  HELLO: 6, WELCOME: 9, REQUEST: 3, RESPONSE: 2, ERROR: 3, SUBSCRIBED: 5, VALUE: 2,
  UNSUBSCRIBED: 2, CLOSE: 2, EVENT: 8, NOTIFY: 2, DELTA: 2, COMPRESSED: 2,
};

/** The largest msgpack array header: what a frame adds to the messages it holds. */
export const FRAME_OVERHEAD = 5;

/** CLOSE codes after which the client opens its session again (the gateway stopped). */
export const RESUMABLE_CLOSES = new Set(['SERVER_SHUTDOWN']);

/** WebSocket close codes with which a server refuses what the client sent: the session ends. */
export const FINAL_CLOSE_CODES = new Set([1002, 1003, 1007, 1008, 1009, 1010]);
