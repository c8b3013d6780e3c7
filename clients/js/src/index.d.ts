// Type declarations of canopy-client (src/index.js).

export type TopicTypeName = 'STRING' | 'INT64' | 'DOUBLE' | 'JSON' | 'BINARY' | 'TIME_SERIES';
export declare const TopicType: Readonly<{ [K in TopicTypeName]: K }>;
export declare const PROTOCOL_VERSION: number;
export declare const DEFAULT_URL: string;
export declare const RESUMED: 'RESUMED';
export declare const NEW_SESSION: 'NEW_SESSION';
export declare const GONE_WHILE_DISCONNECTED: 'DISCONNECTED';

/** A topic value: STRING string, INT64 number (bigint beyond 2^53), DOUBLE number, JSON any, BINARY bytes. */
export type Value = null | boolean | number | bigint | string | Uint8Array | Value[] | { [key: string]: Value };

export interface TopicSpecification {
  type: TopicTypeName;
  properties: Record<string, string>;
}

export interface EventMetadata {
  sequence: number;
  timestamp: number;
  author: string;
}

export interface TimeSeriesEvent extends EventMetadata {
  value: Value;
  original: EventMetadata | null;
}

export interface TopicEvent {
  kind: 'subscribed' | 'value' | 'unsubscribed' | 'disconnected' | 'reconnected';
  /** '' for the connection events */
  path: string;
  type: TopicTypeName | null;
  value: Value;
  specification: TopicSpecification | null;
  reason: string | null;
  /** false for a value delivered without becoming the topic's value */
  retained: boolean;
  event: TimeSeriesEvent | null;
}

export declare class Subscription {
  readonly selector: string;
  readonly ended: boolean;
  unsubscribe(): Promise<void>;
}

export interface FetchedTopic {
  path: string;
  type: TopicTypeName;
  value: Value;
  properties: Record<string, string> | null;
}

export interface TopicView {
  name: string;
  specification: string;
  principal: string;
  roles: string[];
  precedence: number;
  /** 'active', or why the view is not */
  state: string;
}

export interface MissingTopicNotification {
  id: string;
  selector: string;
  sessionId: string;
  properties: Record<string, string>;
  servers: string[];
  path: string;
}

export interface HandlerRegistration {
  readonly token: string;
  readonly path: string;
  close(): Promise<void>;
}

export type Target = { sessionId: string } | { filter: string };

export interface RangeQuery {
  anchor?: 'start' | 'sequence' | 'time' | 'last' | 'last_millis';
  anchorValue?: number;
  span?: 'end' | 'to_sequence' | 'to_time' | 'next' | 'next_millis' | 'until_last' | 'until_last_millis'
    | 'previous' | 'previous_millis' | 'to_start';
  spanValue?: number;
  view?: 'values' | 'latest_edits' | 'all_edits';
  limit?: number | null;
}

export interface ConnectOptions {
  principal?: string | null;
  password?: string | null;
  properties?: Record<string, string>;
  /** seconds to keep reconnecting (default 60; 0 never) */
  reconnectTimeout?: number;
  /** seconds between attempts, with jitter (default 0.5) */
  retryDelay?: number;
  /** seconds per connection attempt (default 10) */
  timeout?: number;
  /** a WebSocket class to use instead of the platform's (or the ws package's) */
  WebSocket?: unknown;
}

export declare class Session {
  readonly sessionId: string;
  readonly properties: Record<string, string>;
  readonly connected: boolean;
  readonly closed: boolean;
  readonly closeReason: CanopyError | null;
  readonly reconnects: number;
  readonly errors: CanopyError[];
  on(name: 'disconnected', fn: (detail: { reason: string }) => void): () => void;
  on(name: 'reconnected', fn: (detail: { resumed: boolean; sessionId: string }) => void): () => void;
  on(name: 'closed', fn: (detail: { error: CanopyError | null }) => void): () => void;
  close(): Promise<void>;
  /** any operation of the wire protocol (docs/PROTOCOL.md) */
  request(op: string, ...args: unknown[]): Promise<any>;
  topics: {
    add(path: string, type: TopicTypeName, properties?: Record<string, string> | null): Promise<'CREATED' | 'EXISTS'>;
    set(path: string, value: Value, options?: { type?: TopicTypeName | null; addIfMissing?: boolean; retain?: boolean }): Promise<void>;
    addAndSet(path: string, value: Value, type?: TopicTypeName | null): Promise<void>;
    remove(selector: string): Promise<number>;
    fetch(selector: string, options?: { withValues?: boolean; withProperties?: boolean; types?: TopicTypeName[] | null; limit?: number | null }): Promise<FetchedTopic[]>;
    subscribe(selector: string, callback: (event: TopicEvent) => void): Promise<Subscription>;
    unsubscribe(selector: string): Promise<void>;
    /** Topics another session subscribed this one to that no subscription of its own matches. */
    unrequested(callback: (event: TopicEvent) => void): { close(): void };
  };
  timeSeries: {
    append(path: string, value: Value, options?: { timestamp?: number | null }): Promise<EventMetadata>;
    edit(path: string, originalSequence: number, value: Value): Promise<EventMetadata>;
    rangeQuery(path: string, query?: RangeQuery): Promise<{ selected: number; events: TimeSeriesEvent[] }>;
  };
  views: {
    create(name: string, specification: string): Promise<TopicView>;
    list(): Promise<TopicView[]>;
    remove(name: string): Promise<void>;
  };
  sessions: {
    getProperties(target: Target): Promise<Record<string, Record<string, string>>>;
    setProperties(properties: Record<string, string | null>, target: Target): Promise<number>;
    close(target: Target): Promise<number>;
  };
  security: {
    get(): Promise<Record<string, any>>;
    update(...commands: unknown[][]): Promise<number>;
  };
  sessionTrees: {
    putTable(branch: string, mappings: [string, string][]): Promise<number>;
    getTable(branch: string): Promise<[string, string][] | null>;
    listTables(): Promise<Record<string, [string, string][]>>;
    removeTable(branch: string): Promise<number>;
  };
  missingTopics: {
    addHandler(path: string, handler: (n: MissingTopicNotification) => boolean | void | Promise<boolean | void>): Promise<HandlerRegistration>;
    list(): Promise<[string, string, string][]>;
  };
  server: { clusterStatus(): Promise<Record<string, any>> };
  metrics: {
    putTopicCollector(name: string, selector: string, options?: { groupByType?: boolean }): Promise<Record<string, any>>;
    putSessionCollector(name: string, filter: string, options?: { groupBy?: string[]; removeMetricsWithNoMatches?: boolean }): Promise<Record<string, any>>;
    listCollectors(): Promise<Record<string, any>[]>;
    removeCollector(name: string): Promise<boolean>;
  };
  fanout: { list(): Promise<Record<string, any>[]> };
  remoteServers: { list(): Promise<Record<string, any>[]>; check(name: string): Promise<Record<string, any>> };
}

export declare function connect(url?: string | string[], options?: ConnectOptions): Promise<Session>;
export declare function encodeValue(value: Value, type?: TopicTypeName | null): [Uint8Array, boolean];
export declare function decodeValue(type: TopicTypeName, data: Uint8Array): Value;
export declare function matcher(selector: string): (path: string) => boolean;

export declare class CanopyError extends Error {
  constructor(message: string, code?: string);
  /** the server's error code (or the client's own: CONNECT_FAILED, CONNECTION_INTERRUPTED...) */
  code: string;
}
export declare class InvalidInputError extends CanopyError {}
export declare class InvalidPathError extends InvalidInputError {}
export declare class InvalidSelectorError extends InvalidInputError {}
export declare class InvalidNameError extends InvalidInputError {}
export declare class InvalidTypeError extends InvalidInputError {}
export declare class InvalidValueError extends InvalidInputError {}
export declare class InvalidSpecificationError extends InvalidInputError {}
export declare class InvalidPropertiesError extends InvalidInputError {}
export declare class InvalidRequestError extends InvalidInputError {}
export declare class FrameTooLargeError extends InvalidInputError {}
export declare class InvalidQueryError extends InvalidInputError {}
export declare class InvalidFilterError extends InvalidInputError {}
export declare class InvalidBranchMappingError extends InvalidInputError {}
export declare class InvalidSecurityCommandError extends InvalidInputError {}
export declare class InvalidFanoutError extends InvalidInputError {}
export declare class InvalidRemoteServerError extends InvalidInputError {}
export declare class InvalidCollectorError extends InvalidInputError {}
export declare class InvalidViewError extends InvalidInputError {}
export declare class ViewSyntaxError extends InvalidViewError {}
export declare class ReferenceTopicError extends CanopyError {}
export declare class TimeSeriesError extends CanopyError {}
export declare class TimestampOrderError extends TimeSeriesError {}
export declare class UnknownSequenceError extends TimeSeriesError {}
export declare class PermissionDeniedError extends CanopyError {}
export declare class AuthenticationError extends CanopyError {}
export declare class TopicExistsMismatchError extends CanopyError {}
export declare class NoSuchTopicError extends CanopyError {}
export declare class UnknownOperationError extends CanopyError {}
export declare class ProtocolViolationError extends CanopyError {}
export declare class UnavailableError extends CanopyError {}
export declare class NoSuchNodeError extends CanopyError {}
export declare class NoSuchSessionError extends CanopyError {}
export declare class RefusedError extends CanopyError {}
export declare class RequestCancelledError extends CanopyError {}
export declare class LimitExceededError extends CanopyError {}
export declare class SessionClosedError extends CanopyError {}
export declare class ConnectionInterruptedError extends CanopyError {}
export declare class ConnectError extends CanopyError {}
export declare function errorFor(code: string, message: string): CanopyError;
