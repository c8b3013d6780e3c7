// Errors: every failure is a CanopyError carrying the server's code (or the client's own for what
// never reached the server). The classes mirror the Python client's (canopy/errors.py), so code
// can catch exactly what it handles:
//
//   CanopyError
//   ├── InvalidInputError (INVALID_INPUT) and its kinds: INVALID_PATH, INVALID_SELECTOR, INVALID_NAME,
//   │     INVALID_TYPE, INVALID_VALUE, INVALID_SPECIFICATION, INVALID_PROPERTIES, INVALID_REQUEST,
//   │     INVALID_QUERY, INVALID_FILTER, INVALID_BRANCH_MAPPING, INVALID_SECURITY_COMMAND,
//   │     INVALID_FANOUT, INVALID_REMOTE_SERVER, INVALID_COLLECTOR, FRAME_TOO_LARGE, INVALID_VIEW (VIEW_SYNTAX)
//   ├── TimeSeriesError (TIME_SERIES_ERROR, TIMESTAMP_ORDER, UNKNOWN_SEQUENCE)
//   ├── PermissionDeniedError, AuthenticationError, TopicExistsMismatchError, NoSuchTopicError,
//   │   UnknownOperationError, ProtocolViolationError, UnavailableError, NoSuchNodeError, NoSuchSessionError,
//   │   RefusedError, RequestCancelledError, LimitExceededError, ReferenceTopicError
//   ├── SessionClosedError (SESSION_CLOSED, or why the session ended)
//   ├── ConnectionInterruptedError (CONNECTION_INTERRUPTED: the request was in flight when the
//   │     connection dropped; its outcome is unknown, the session goes on)
//   └── ConnectError (CONNECT_FAILED)

export class CanopyError extends Error {
  constructor(message, code) {
    super(message);
    this.name = new.target.name;
    this.code = code ?? new.target.code ?? 'INTERNAL';
  }
}

function kind(name, code, base = CanopyError) {
  const cls = { [name]: class extends base {} }[name];
  cls.code = code;
  return cls;
}

export const InvalidInputError = kind('InvalidInputError', 'INVALID_INPUT');
export const InvalidPathError = kind('InvalidPathError', 'INVALID_PATH', InvalidInputError);
export const InvalidSelectorError = kind('InvalidSelectorError', 'INVALID_SELECTOR', InvalidInputError);
export const InvalidNameError = kind('InvalidNameError', 'INVALID_NAME', InvalidInputError);
export const InvalidTypeError = kind('InvalidTypeError', 'INVALID_TYPE', InvalidInputError);
export const InvalidValueError = kind('InvalidValueError', 'INVALID_VALUE', InvalidInputError);
export const InvalidSpecificationError = kind('InvalidSpecificationError', 'INVALID_SPECIFICATION', InvalidInputError);
export const InvalidPropertiesError = kind('InvalidPropertiesError', 'INVALID_PROPERTIES', InvalidInputError);
export const InvalidRequestError = kind('InvalidRequestError', 'INVALID_REQUEST', InvalidInputError);
export const FrameTooLargeError = kind('FrameTooLargeError', 'FRAME_TOO_LARGE', InvalidInputError);
export const InvalidQueryError = kind('InvalidQueryError', 'INVALID_QUERY', InvalidInputError);
export const InvalidFilterError = kind('InvalidFilterError', 'INVALID_FILTER', InvalidInputError);
export const InvalidBranchMappingError = kind('InvalidBranchMappingError', 'INVALID_BRANCH_MAPPING', InvalidInputError);
export const InvalidSecurityCommandError = kind('InvalidSecurityCommandError', 'INVALID_SECURITY_COMMAND', InvalidInputError);
export const InvalidFanoutError = kind('InvalidFanoutError', 'INVALID_FANOUT', InvalidInputError);
export const InvalidRemoteServerError = kind('InvalidRemoteServerError', 'INVALID_REMOTE_SERVER', InvalidInputError);
export const InvalidCollectorError = kind('InvalidCollectorError', 'INVALID_COLLECTOR', InvalidInputError);
export const InvalidViewError = kind('InvalidViewError', 'INVALID_VIEW', InvalidInputError);
export const ViewSyntaxError = kind('ViewSyntaxError', 'VIEW_SYNTAX', InvalidViewError);
export const ReferenceTopicError = kind('ReferenceTopicError', 'REFERENCE_TOPIC');
export const TimeSeriesError = kind('TimeSeriesError', 'TIME_SERIES_ERROR');
export const TimestampOrderError = kind('TimestampOrderError', 'TIMESTAMP_ORDER', TimeSeriesError);
export const UnknownSequenceError = kind('UnknownSequenceError', 'UNKNOWN_SEQUENCE', TimeSeriesError);
export const PermissionDeniedError = kind('PermissionDeniedError', 'PERMISSION_DENIED');
export const AuthenticationError = kind('AuthenticationError', 'AUTHENTICATION_FAILED');
export const TopicExistsMismatchError = kind('TopicExistsMismatchError', 'TOPIC_EXISTS_MISMATCH');
export const NoSuchTopicError = kind('NoSuchTopicError', 'NO_SUCH_TOPIC');
export const UnknownOperationError = kind('UnknownOperationError', 'UNKNOWN_OPERATION');
export const ProtocolViolationError = kind('ProtocolViolationError', 'PROTOCOL_ERROR');
export const UnavailableError = kind('UnavailableError', 'UNAVAILABLE');
export const NoSuchNodeError = kind('NoSuchNodeError', 'NO_SUCH_NODE');
export const NoSuchSessionError = kind('NoSuchSessionError', 'NO_SUCH_SESSION');
export const RefusedError = kind('RefusedError', 'REFUSED');
export const RequestCancelledError = kind('RequestCancelledError', 'CANCELLED');
export const LimitExceededError = kind('LimitExceededError', 'LIMIT_EXCEEDED');
export const SessionClosedError = kind('SessionClosedError', 'SESSION_CLOSED');
export const ConnectionInterruptedError = kind('ConnectionInterruptedError', 'CONNECTION_INTERRUPTED');
export const ConnectError = kind('ConnectError', 'CONNECT_FAILED');

const BY_CODE = new Map([
  InvalidInputError, InvalidPathError, InvalidSelectorError, InvalidNameError, InvalidTypeError,
  InvalidValueError, InvalidSpecificationError, InvalidPropertiesError, InvalidRequestError,
  FrameTooLargeError, InvalidQueryError, InvalidFilterError, InvalidBranchMappingError,
  InvalidSecurityCommandError, InvalidFanoutError, InvalidRemoteServerError, InvalidCollectorError, InvalidViewError,
  ViewSyntaxError, ReferenceTopicError, TimeSeriesError, TimestampOrderError, UnknownSequenceError,
  PermissionDeniedError, AuthenticationError, TopicExistsMismatchError, NoSuchTopicError,
  UnknownOperationError, ProtocolViolationError, UnavailableError, NoSuchNodeError, NoSuchSessionError,
  RefusedError, RequestCancelledError, LimitExceededError, SessionClosedError, ConnectionInterruptedError, ConnectError,
].map((cls) => [cls.code, cls]));
BY_CODE.set('UNSUPPORTED_VERSION', ProtocolViolationError);
BY_CODE.set('CONVERSION_FAILED', InvalidValueError);

/** The error for a server's code (an unknown code gives a plain CanopyError with that code). */
export function errorFor(code, message) {
  const cls = BY_CODE.get(code) ?? CanopyError;
  return new cls(message, code);
}
