/**
 * @module @csa2/jobs/testing
 * Test support for code that runs real BullMQ on a real Redis: the one "poll until" and the queue and
 * stream waits built on it. Not part of the package's public API.
 */
export * from './poll.js';
export * from './queue-support.js';
