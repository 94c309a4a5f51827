/**
 * @module requests/documents
 * One document of a POST /v1/documents (or a documents batch line's body) → its id and token ids:
 * the model checked, exactly one of `text` and `token_ids`, the id not reserved, tokenized within
 * CSA2_MAX_DOCUMENT_TOKENS. Throws ApiError 400s naming the field.
 */
import { randomBytes } from 'node:crypto';
import { validateTokenIds } from '@csa2/core';
import type { GatewayDeps } from '../capabilities.js';
import { RESERVED_DOCUMENT_PREFIX } from '../documents.js';
import { invalidRequest, modelNotFound, type ApiError } from '../errors.js';
import type { DocumentInput } from '../schemas/documents.js';
import { TokenLimitError } from '../tokenize-pool.js';

/** The capabilities this module takes. */
export type DocumentRequestDeps = Pick<GatewayDeps, 'limits' | 'model' | 'tokenize' | 'tokenizer'>;

export interface PreparedDocument {
  readonly id: string;
  readonly tokenIds: number[];
}

/** Checks and tokenizes one document of a POST /v1/documents (also a batch line's body); throws ApiError 400s. */
export async function prepareDocument(deps: DocumentRequestDeps, input: DocumentInput, param: (field: string) => string): Promise<PreparedDocument> {
  const { tokenizer, limits } = deps;
  if (input.model !== undefined && input.model !== deps.model.name) throw modelNotFound(input.model, deps.model.name, param('model'));
  if ((input.text === undefined) === (input.token_ids === undefined)) {
    throw invalidRequest(`A document needs exactly one of 'text' and 'token_ids'`, param(input.text === undefined ? 'text' : 'token_ids'), 'invalid_value');
  }
  if (input.id?.startsWith(RESERVED_DOCUMENT_PREFIX) === true) {
    throw invalidRequest(`Invalid value for '${param('id')}': ids starting with '${RESERVED_DOCUMENT_PREFIX}' are reserved`, param('id'), 'invalid_value');
  }
  let tokenIds: number[];
  const field = param(input.text !== undefined ? 'text' : 'token_ids');
  const tooMany = (n: string): ApiError =>
    invalidRequest(
      `The document has ${n} tokens; this server accepts at most ${limits.maxDocumentTokens} (CSA2_MAX_DOCUMENT_TOKENS)`,
      field,
      'context_length_exceeded',
    );
  if (input.text !== undefined) {
    // refused before (or while) it is tokenized when it cannot fit: the BOS takes one token
    const bos = tokenizer.bosId !== null ? 1 : 0;
    try {
      tokenIds = await deps.tokenize.encode(input.text, limits.maxDocumentTokens - bos);
    } catch (err) {
      if (err instanceof TokenLimitError) throw tooMany(`at least ${err.tokensAtLeast + bos}`);
      throw err;
    }
    if (tokenizer.bosId !== null) tokenIds.unshift(tokenizer.bosId);
  } else {
    tokenIds = input.token_ids ?? [];
    try {
      validateTokenIds(tokenIds, deps.model.vocabSize);
    } catch (err) {
      throw invalidRequest(
        `Invalid value for '${param('token_ids')}': ${err instanceof Error ? err.message : String(err)}`,
        param('token_ids'),
        'invalid_value',
      );
    }
  }
  if (tokenIds.length === 0) throw invalidRequest(`Invalid value for '${field}': the document is empty`, field, 'invalid_value');
  if (tokenIds.length > limits.maxDocumentTokens) throw tooMany(String(tokenIds.length));
  return { id: input.id ?? `doc-${randomBytes(12).toString('base64url')}`, tokenIds };
}
