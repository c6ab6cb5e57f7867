export * from './collab_client.js';
