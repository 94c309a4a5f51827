/**
 * @module routes/tokenize
 * POST /tokenize and POST /detokenize in vLLM's shapes, counting exactly what the model sees:
 * the same functions build the prompt as /v1/completions and /v1/chat/completions do
 * (requests/completions.ts: the tokenizer's BOS before a raw prompt, the chat template for messages,
 * BOS dropped after a document).
 *
 * - `{prompt, add_special_tokens?, return_token_strs?, model?}` (completions) or
 *   `{messages, add_generation_prompt?, return_token_strs?, model?}` (chat) →
 *   `{count, max_model_len, tokens, token_strs}`;
 * - extension `document_id`: the prompt as it follows that ready document; `document_tokens` is
 *   the document's length and `count` includes it (the prompt length a completion is checked
 *   against); `tokens` lists the prompt's own ids;
 * - `{tokens, model?}` → `{prompt}`.
 *
 * `token_strs` holds each token decoded on its own (a token that ends inside a UTF-8 character
 * shows U+FFFD). Options this server cannot honour (`add_generation_prompt: false`,
 * `continue_final_message`, `chat_template`, `tools`, `add_special_tokens: true` with messages) are
 * refused by name. Both routes need an API key (documents are per tenant).
 */
import { Hono } from 'hono';
import { validateTokenIds } from '@csa2/core';
import type { GatewayDeps } from '../capabilities.js';
import { ApiError, invalidRequest } from '../errors.js';
import { documentStatus, type DocumentDeps } from '../documents.js';
import type { TenantVariables } from '../middleware/api-key-auth.js';
import { readJson } from '../middleware/json-body.js';
import { chatPromptIds, completionPromptIds, type CompletionRequestDeps } from '../requests/completions.js';
import { parseRequest } from '../schemas/parse.js';
import { DetokenizeRequestSchema, TokenizeChatRequestSchema, TokenizeCompletionRequestSchema } from '../schemas/tokenize.js';

/** The capabilities this module takes. */
export type TokenizeRouteDeps = Pick<GatewayDeps, 'limits' | 'model' | 'tokenizer'> & DocumentDeps & CompletionRequestDeps;

function refuse(param: string, message: string): ApiError {
  return invalidRequest(`'${param}' ${message}`, param, 'unsupported_parameter');
}

function checkModel(deps: TokenizeRouteDeps, model: string | null | undefined): void {
  if (model !== null && model !== undefined && model !== deps.model.name) {
    throw new ApiError(400, `The model '${model}' does not exist; this server serves '${deps.model.name}'`, { param: 'model', code: 'model_not_found' });
  }
}

async function documentTokens(deps: TokenizeRouteDeps, tenant: string, documentId: string | null): Promise<number> {
  if (documentId === null) return 0;
  const doc = await documentStatus(deps, tenant, documentId);
  if (doc === null) throw new ApiError(404, `No document found with id '${documentId}'`, { param: 'document_id', code: 'document_not_found' });
  if (doc.state.status !== 'ready')
    throw new ApiError(409, `Document '${documentId}' is not ready (it is ${doc.state.status})`, { param: 'document_id', code: 'document_not_ready' });
  return doc.state.tokens;
}

export function tokenizeRoutes(deps: TokenizeRouteDeps): Hono<{ Variables: TenantVariables }> {
  const app = new Hono<{ Variables: TenantVariables }>();

  app.post('/tokenize', async (c) => {
    const raw = await readJson(c);
    const chat = typeof raw === 'object' && raw !== null && 'messages' in raw;
    let ids: number[];
    let documentId: string | null;
    let tokenStrs: boolean;
    if (chat) {
      const body = parseRequest(TokenizeChatRequestSchema, raw);
      checkModel(deps, body.model);
      if (body.add_generation_prompt === false) throw refuse('add_generation_prompt', 'must be true: the chat template always ends with the assistant prompt');
      if (body.continue_final_message === true) throw refuse('continue_final_message', 'is not supported');
      if (body.add_special_tokens === true) throw refuse('add_special_tokens', 'is not supported with messages (the chat template adds the special tokens)');
      if (body.chat_template !== null && body.chat_template !== undefined) throw refuse('chat_template', 'is not supported (the tokenizer has one template)');
      if ((body.tools?.length ?? 0) > 0) throw refuse('tools', 'are not supported');
      documentId = body.document_id ?? null;
      ids = await chatPromptIds(deps, body.messages, { documentId });
      tokenStrs = body.return_token_strs === true;
    } else {
      const body = parseRequest(TokenizeCompletionRequestSchema, raw);
      checkModel(deps, body.model);
      documentId = body.document_id ?? null;
      ids = await completionPromptIds(deps, body.prompt, { documentId, addBos: body.add_special_tokens !== false });
      tokenStrs = body.return_token_strs === true;
    }
    const docTokens = await documentTokens(deps, c.get('tenant'), documentId);
    return c.json({
      count: docTokens + ids.length,
      max_model_len: deps.limits.contextTokens,
      tokens: ids,
      token_strs: tokenStrs ? ids.map((id) => deps.tokenizer.decode([id])) : null,
      ...(documentId !== null ? { document_tokens: docTokens } : {}),
    });
  });

  app.post('/detokenize', async (c) => {
    const body = parseRequest(DetokenizeRequestSchema, await readJson(c));
    checkModel(deps, body.model);
    try {
      validateTokenIds(body.tokens, deps.model.vocabSize);
    } catch (err) {
      throw invalidRequest(`Invalid value for 'tokens': ${err instanceof Error ? err.message : String(err)}`, 'tokens', 'invalid_value');
    }
    return c.json({ prompt: deps.tokenizer.decode(body.tokens) });
  });

  return app;
}
