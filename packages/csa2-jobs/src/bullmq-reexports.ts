/**
 * @module bullmq-reexports
 * The parts of BullMQ the services use, re-exported so that they depend on @csa2/jobs only (one
 * BullMQ version for the gateway and both workers).
 */
export { Queue, QueueEvents, Worker, Job, UnrecoverableError, DelayedError } from 'bullmq';
export type { JobsOptions, Processor, WorkerOptions, QueueOptions } from 'bullmq';
export type { Redis } from 'ioredis';
