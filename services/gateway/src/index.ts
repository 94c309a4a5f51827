/**
 * @module @csa2/gateway
 * The REST gateway: OpenAI-compatible completions and chat completions, documents, models,
 * health and metrics, in front of the prefill/decode queues.
 */
export { createApp, type GatewayApp } from './app.js';
export { startGateway, type RunningGateway, type StartOptions } from './server.js';
export type { GatewayDeps, GatewayQueues, ServedModel } from './capabilities.js';
export { connectGatewayDeps, type ConnectOptions, type ConnectedDeps } from './composition-root.js';
export { loadGatewayConfig, resolveLimits, parseApiKeys, type GatewayConfig, type GatewayLimits } from './config.js';
export { ApiError, CSA2_ERROR_TO_HTTP_STATUS, statusOfCode, type ApiErrorBody } from './errors.js';
export { createGatewayMetrics, type GatewayMetrics } from './metrics.js';
