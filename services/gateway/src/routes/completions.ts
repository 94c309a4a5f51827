/**
 * @module routes/completions
 * POST /v1/completions and POST /v1/chat/completions (OpenAI-compatible). Both turn their body
 * into a GenerationRequest (requests/completions: parsed, checked, tokenized), admit it under the
 * key's limits, and hand it to generation.ts.
 */
import { Hono, type Context } from 'hono';
import type { GatewayDeps } from '../capabilities.js';
import { isRedisUnavailable, redisUnavailable } from '../errors.js';
import { enqueueGeneration, planGeneration, plannedTokens, respondGeneration, type GenerationDeps, type GenerationRequest } from '../generation.js';
import { releaseBody } from '../middleware/body-budget.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import type { RequestIdVariables } from '../middleware/request-id.js';
import { readJson } from '../middleware/json-body.js';
import { chatRequest, completionRequest, type CompletionRequestDeps } from '../requests/completions.js';

/** The capabilities this module takes. */
export type CompletionsRouteDeps = Pick<GatewayDeps, 'keyLimiter' | 'keyLimits'> & GenerationDeps & CompletionRequestDeps;

async function generate(
  c: Context<{ Variables: TenantVariables & RequestIdVariables }>,
  deps: CompletionsRouteDeps,
  request: Omit<GenerationRequest, 'weight'>,
): Promise<Response> {
  const keyId = c.get('keyId');
  const limits = deps.keyLimits(keyId);
  const plan = await planGeneration(deps, { ...request, weight: limits.weight });
  // the key's limits: its prompt plus what it may generate count against its tokens per minute
  const admission = await deps.keyLimiter.admitCompletion(keyId, limits, { requestId: plan.requestId, tokens: plannedTokens(plan) }).catch((err: unknown) => {
    throw isRedisUnavailable(err) ? redisUnavailable(err) : err;
  });
  try {
    await enqueueGeneration(deps, plan);
  } catch (err) {
    admission.release();
    throw err;
  }
  return respondGeneration(c, deps, plan, admission);
}

export function completionsRoutes(deps: CompletionsRouteDeps): Hono<{ Variables: TenantVariables & RequestIdVariables }> {
  const app = new Hono<{ Variables: TenantVariables & RequestIdVariables }>();
  app.post('/completions', async (c) => {
    const request = await completionRequest(deps, c.get('tenant'), await readJson(c), c.get('reqId'));
    releaseBody(c.req.raw); // tokenized: the answer may take long, the body budget is not needed for it
    return generate(c, deps, request);
  });
  app.post('/chat/completions', async (c) => {
    const request = await chatRequest(deps, c.get('tenant'), await readJson(c), c.get('reqId'));
    releaseBody(c.req.raw);
    return generate(c, deps, request);
  });
  return app;
}
