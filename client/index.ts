// `scriptorium/client`: what a browser app needs to edit a document with others: the client,
// its view binding, and remote cursors.
export {
  CollabClient,
  refusedLocalSteps,
  type CollabClientOptions,
  type CollabStatus,
} from './collab_client.js';
export { Presence, remoteCursors, type PresenceOptions, type RemoteCursor } from './presence.js';
export { bindView, readPendingInput, type BindViewOptions } from './view_binding.js';
