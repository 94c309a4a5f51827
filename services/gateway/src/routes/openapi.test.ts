/**
 * The OpenAPI document: valid OpenAPI 3.1 (the official schema, through
 * @seriousme/openapi-schema-validator, offline), every component a valid JSON Schema 2020-12 (ajv),
 * every $ref resolvable, made from the very zod schemas the routes validate with, and listing
 * exactly the routes the app serves. /docs renders it offline. CORS: off by default, on when
 * configured (preflights answered before authentication).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { z } from 'zod';
import { createApp } from '../app.js';
import { OPERATIONS } from '../openapi/spec.js';
import { BatchCreateRequestSchema } from '../schemas/batches.js';
import { CompletionRequestSchema } from '../schemas/completions.js';
import { KEY_A, get, startHarness, type Harness } from '../testing/harness.js';

type Json = Record<string, any>;

/** Hono's `/v1/files/:file_id`, `/v1/models/:id{.+}` → OpenAPI's `/v1/files/{file_id}`. */
function openApiPath(honoPath: string): string {
  return honoPath.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?/g, '{$1}');
}

describe('OpenAPI 3.1 document, /docs and CORS', () => {
  let h: Harness;
  let spec: Json;

  before(async () => {
    h = await startHarness();
    const res = await h.app.request('http://gateway.test/openapi.json');
    assert.equal(res.status, 200);
    spec = (await res.json()) as Json;
  });
  after(async () => {
    await h?.close();
  });

  test('validates against the OpenAPI 3.1 schema and every $ref resolves', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(spec));
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
    assert.equal(validator.version, '3.1');
    assert.doesNotThrow(() => validator.resolveRefs());
    const refs = JSON.stringify(spec).match(/"\$ref":"[^"]+"/g) ?? [];
    for (const ref of new Set(refs)) {
      const name = /#\/components\/schemas\/([^"]+)"/.exec(ref)?.[1];
      assert.ok(name !== undefined && spec['components']['schemas'][name] !== undefined, `${ref} resolves`);
    }
  });

  test('every component schema is a valid JSON Schema 2020-12', () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    for (const [name, schema] of Object.entries(spec['components']['schemas'] as Record<string, Json>)) {
      assert.equal(ajv.validateSchema(schema), true, `${name}: ${JSON.stringify(ajv.errors)}`);
    }
  });

  test('request schemas are the ones the routes validate with', () => {
    // the schema converted on its own (a schema with an id comes back as its $defs entry)
    const generated = (s: z.ZodType, id: string): Json => {
      const out = z.toJSONSchema(s, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as Json;
      const { $schema: _s, $id: _i, ...rest } = (out['$defs']?.[id] ?? out) as Json;
      return rest;
    };
    assert.deepEqual(spec['components']['schemas']['CompletionRequest'], generated(CompletionRequestSchema, 'CompletionRequest'));
    assert.deepEqual(spec['components']['schemas']['BatchCreateRequest'], generated(BatchCreateRequestSchema, 'BatchCreateRequest'));
    const body = spec['paths']['/v1/completions']['post']['requestBody']['content']['application/json']['schema'];
    assert.deepEqual(body, { $ref: '#/components/schemas/CompletionRequest' });
    assert.ok(spec['components']['schemas']['CompletionRequest']['properties']['document_id'], 'extensions documented');
  });

  test('n, logprobs and echo are in the request schemas with their bounds, and the responses carry the logprobs shapes', () => {
    const schemas = spec['components']['schemas'] as Record<string, Json>;
    const completion = schemas['CompletionRequest']?.['properties'] as Record<string, Json>;
    const flat = (p: Json): Json => (p['anyOf'] as Json[] | undefined)?.find((b) => b['type'] !== 'null') ?? p;
    assert.equal(flat(completion['logprobs'] as Json)['maximum'], 5);
    assert.equal(flat(completion['logprobs'] as Json)['minimum'], 0);
    assert.equal(flat(completion['n'] as Json)['minimum'], 1);
    assert.deepEqual(flat(completion['echo'] as Json)['type'], ['boolean', 'null']);
    assert.ok(flat(completion['best_of'] as Json));
    const chat = schemas['ChatCompletionRequest']?.['properties'] as Record<string, Json>;
    assert.equal(flat(chat['top_logprobs'] as Json)['maximum'], 20);
    assert.deepEqual(flat(chat['logprobs'] as Json)['type'], ['boolean', 'null']);
    const choiceLogprobs = (id: string): Json => schemas[id]?.['properties']['choices']['items']['properties']['logprobs'] as Json;
    assert.match(JSON.stringify(choiceLogprobs('CompletionResponse')), /#\/components\/schemas\/CompletionLogprobs/);
    assert.match(JSON.stringify(choiceLogprobs('ChatCompletionResponse')), /#\/components\/schemas\/ChatLogprobs/);
    assert.deepEqual(Object.keys(schemas['CompletionLogprobs']?.['properties'] as Json).sort(), ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
    assert.ok((schemas['ChatLogprobs']?.['properties']['content']['items']['properties'] as Json)['bytes']);
  });

  test('lists exactly the routes the app serves', () => {
    const served = new Set(
      h.app.routes.filter((r) => r.method !== 'ALL' && !r.path.includes('*')).map((r) => `${r.method.toLowerCase()} ${openApiPath(r.path)}`),
    );
    const documented = new Set(
      Object.entries(spec['paths'] as Record<string, Json>).flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m} ${path}`)),
    );
    assert.deepEqual(
      [...served].filter((r) => !documented.has(r)),
      [],
      'served but not documented',
    );
    assert.deepEqual(
      [...documented].filter((r) => !served.has(r)),
      [],
      'documented but not served',
    );
    assert.equal(documented.size, OPERATIONS.length);
  });

  test('/docs is a self-contained page naming every operation', async () => {
    const res = await h.app.request('http://gateway.test/docs');
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/html/);
    const html = await res.text();
    for (const op of OPERATIONS) assert.ok(html.includes(`id="op-${op.operationId}"`), op.operationId);
    assert.doesNotMatch(html, /<script|<link[^>]+stylesheet|src="http|href="https?:\/\/(?!json-schema)/i, 'nothing loaded from elsewhere');
  });

  test('CORS is off by default', async () => {
    const res = await h.app.request('http://gateway.test/v1/models', { headers: { origin: 'https://app.example', authorization: `Bearer ${KEY_A}` } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('access-control-allow-origin'), null);
  });

  test('CORS on: allowed origins get the headers, preflights pass before authentication, others get none', async () => {
    const app = createApp({ ...h.deps, config: { ...h.deps.config, corsOrigins: ['https://app.example'] } });
    const preflight = await app.request('http://gateway.test/v1/completions', {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(preflight.headers.get('access-control-allow-headers') ?? '', /authorization/);
    const res = await app.request(...get('/v1/models'));
    assert.equal(res.status, 200);
    const withOrigin = await app.request('http://gateway.test/v1/models', { headers: { origin: 'https://app.example', authorization: `Bearer ${KEY_A}` } });
    assert.equal(withOrigin.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(withOrigin.headers.get('access-control-expose-headers') ?? '', /retry-after/);
    const other = await app.request('http://gateway.test/v1/models', { headers: { origin: 'https://evil.example', authorization: `Bearer ${KEY_A}` } });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
  });
});
