/**
 * @module testing
 * Test support for other packages (`@csa2/artifacts/testing`): a real local S3 server (s3rver in a
 * child process) and the object-store conformance suite.
 */
export { startS3Server, S3RVER_CREDENTIALS } from './s3-server.js';
export { runObjectStoreConformance } from './store-conformance.js';
export { assertSameBits, randomFakeQuantRows } from './artifact-test-support.js';
