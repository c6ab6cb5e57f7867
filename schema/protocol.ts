// `scriptorium/protocol`: what travels between a client and the server, for hosts and for
// clients written without `scriptorium/client`: the error codes and the typed Socket.io event
// maps with the messages they carry. Each name here is part of the wire contract.
export { errorBody, errors, isErrorCode, type ErrorBody, type ErrorCode } from './errors.js';
export {
  clientIdPattern,
  docIdPattern,
  presenceColorPattern,
  presenceNameMaxLength,
  type BatchLimits,
  type ClientToServerEvents,
  type ClosingNotice,
  type DocAnswer,
  type DocJSON,
  type DocRoom,
  type ErrorAnswer,
  type HandshakeAuth,
  type HandshakeQuery,
  type PresenceBroadcast,
  type PresenceLeave,
  type PresenceUpdate,
  type ServerToClientEvents,
  type StepJSON,
  type StepsAnswer,
  type StepsBroadcast,
  type StepsRequest,
  type StepsSinceAnswer,
  type SyncAnswer,
  type SyncRequest,
} from './events.js';
