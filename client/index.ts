export * from './collab_client.js';
export * from './presence.js';
