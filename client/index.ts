export * from './collab_client.js';
export * from './presence.js';
export * from './view_binding.js';
