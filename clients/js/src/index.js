// canopy-client: canopy's JavaScript client, for browsers and Node 18 or later.
//
//   import { connect } from 'canopy-client';
//   const session = await connect('ws://127.0.0.1:8080', { principal: 'admin', password });
//   await session.topics.addAndSet('demo/greeting', 'hello');
//   const sub = await session.topics.subscribe('?demo//', (e) => console.log(e.kind, e.path, e.value));
//
// See README.md beside this directory, and docs/PROTOCOL.md for the wire protocol it speaks.

export { connect, Session, Subscription, TopicType, DEFAULT_URL, encodeValue, decodeValue, RESUMED, NEW_SESSION, GONE_WHILE_DISCONNECTED } from './session.js';
export * from './errors.js';
export { PROTOCOL_VERSION } from './protocol.js';
export { matcher } from './selectors.js';
