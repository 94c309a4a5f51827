/**
 * /tokenize and /detokenize: the tokens equal exactly the prompt ids the decode job of the same
 * completion or chat request carries (chat template included, document prefix counted), in vLLM's
 * response shapes; refused options and bad input name their field.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { DecodeJob } from '@csa2/jobs';
import {
  MODEL_NAME,
  TENANT_A,
  fakeDecoder,
  finalEntry,
  post,
  startHarness,
  tokenEntries,
  writeEntries,
  writeManifest,
  type Harness,
} from '../testing/harness.js';

type Json = Record<string, any>;

describe('tokenize and detokenize', () => {
  let h: Harness;
  const jobs = new Map<string, DecodeJob>();

  before(async () => {
    h = await startHarness();
    fakeDecoder(h, async (job, redis) => {
      jobs.set(job.data.requestId, job.data);
      await writeEntries(redis, job.data.requestId, [...tokenEntries('ok'), finalEntry(job.data, 2)]);
    });
    await writeManifest(h, TENANT_A, 'tok-doc', 40);
  });
  after(async () => {
    await h?.close();
  });

  async function call(path: string, body: unknown): Promise<{ status: number; json: Json }> {
    const res = await h.app.request(...post(path, body));
    return { status: res.status, json: (await res.json()) as Json };
  }

  /** The prompt ids the decode job of a direct request carries. */
  async function jobPromptIds(path: string, body: Json): Promise<number[]> {
    const r = await call(path, { model: MODEL_NAME, max_tokens: 2, ...body });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return jobs.get(r.json['id'] as string)?.promptIds ?? [];
  }

  test('a prompt: the tokens a completion of it sends to the decoder, in vLLM shape', async () => {
    const prompt = 'Tokenize me, exactly.';
    const r = await call('/tokenize', { model: MODEL_NAME, prompt, return_token_strs: true });
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(r.json).sort(), ['count', 'max_model_len', 'token_strs', 'tokens']);
    assert.deepEqual(r.json['tokens'], await jobPromptIds('/v1/completions', { prompt }));
    assert.equal(r.json['count'], (r.json['tokens'] as number[]).length);
    assert.equal(r.json['max_model_len'], h.deps.limits.contextTokens);
    assert.equal((r.json['token_strs'] as string[]).join(''), prompt);
    assert.equal((await call('/tokenize', { prompt })).json['token_strs'], null, 'model is optional; token_strs null unless asked');
  });

  test('messages: the chat template, exactly as /v1/chat/completions renders it', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'How many tokens?' },
    ];
    const r = await call('/tokenize', { model: MODEL_NAME, messages });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json['tokens'], await jobPromptIds('/v1/chat/completions', { messages }));
    assert.ok((r.json['count'] as number) > 'How many tokens?'.length, 'the template is counted');
  });

  test('document_id: count includes the document, tokens are the prompt as it follows the document', async () => {
    const r = await call('/tokenize', { prompt: ' and a question', document_id: 'tok-doc' });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json['tokens'], await jobPromptIds('/v1/completions', { prompt: ' and a question', document_id: 'tok-doc' }));
    assert.equal(r.json['document_tokens'], 40);
    assert.equal(r.json['count'], 40 + (r.json['tokens'] as number[]).length);
    assert.equal((await call('/tokenize', { prompt: 'x', document_id: 'nope' })).status, 404);
  });

  test('detokenize is the inverse of tokenize', async () => {
    const text = 'Round trip: ünïcödé too.';
    const { json } = await call('/tokenize', { prompt: text });
    const back = await call('/detokenize', { model: MODEL_NAME, tokens: json['tokens'] });
    assert.deepEqual(back, { status: 200, json: { prompt: text } });
  });

  test('refused options and bad input name their field; an API key is required', async () => {
    const param = async (path: string, body: unknown): Promise<unknown> => {
      const r = await call(path, body);
      assert.equal(r.status, 400, JSON.stringify(r.json));
      return r.json['error']['param'];
    };
    const messages = [{ role: 'user', content: 'hi' }];
    assert.equal(await param('/tokenize', { messages, add_generation_prompt: false }), 'add_generation_prompt');
    assert.equal(await param('/tokenize', { messages, continue_final_message: true }), 'continue_final_message');
    assert.equal(await param('/tokenize', { messages, chat_template: '{{x}}' }), 'chat_template');
    assert.equal(await param('/tokenize', { prompt: 5 }), 'prompt');
    assert.equal(await param('/tokenize', { prompt: 'x', model: 'other' }), 'model');
    assert.equal(await param('/detokenize', { tokens: [1, 999_999] }), 'tokens');
    assert.equal(await param('/detokenize', { tokens: 'abc' }), 'tokens');
    assert.equal((await h.app.request(...post('/tokenize', { prompt: 'x' }, null))).status, 401);
  });
});
