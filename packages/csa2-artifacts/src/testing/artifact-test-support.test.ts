/**
 * @module testing/artifact-test-support.test
 * The in-memory fake used by the writer and reader tests passes the same ObjectStore conformance
 * suite as the real backends, so what those tests show holds for a conforming store.
 */
import { runObjectStoreConformance } from './store-conformance.js';
import { MemoryObjectStore } from './artifact-test-support.js';

runObjectStoreConformance('MemoryObjectStore (test fake)', async () => ({ store: new MemoryObjectStore(), cleanup: async () => undefined }));
