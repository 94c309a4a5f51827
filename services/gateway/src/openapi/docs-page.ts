/**
 * @module openapi/docs-page
 * GET /docs: the API reference rendered on the server from the OpenAPI document — one HTML page with
 * its CSS inline, no script and nothing fetched from elsewhere, so it works offline and behind
 * strict proxies. Operations are grouped by tag; each shows its auth, parameters, request body and
 * responses; every component schema is a table of its properties, with links between them.
 */

type Json = Record<string, unknown>;

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);
}

/** Escaped text with `code` spans. */
function prose(s: string): string {
  return escapeHtml(s).replace(/`([^`]+)`/g, '<code>$1</code>');
}

function refName(ref: string): string {
  return ref.slice(ref.lastIndexOf('/') + 1);
}

/** A one-line type of a JSON Schema: `string`, `integer | null`, `array<Batch>`, `"list"`, … (HTML). */
export function typeOf(schema: unknown): string {
  if (typeof schema !== 'object' || schema === null) return 'any';
  const s = schema as Json;
  if (typeof s['$ref'] === 'string') {
    const name = refName(s['$ref']);
    return `<a href="#schema-${escapeHtml(name)}">${escapeHtml(name)}</a>`;
  }
  if ('const' in s) return `<code>${escapeHtml(JSON.stringify(s['const']))}</code>`;
  if (Array.isArray(s['enum'])) return (s['enum'] as unknown[]).map((v) => `<code>${escapeHtml(JSON.stringify(v))}</code>`).join(' | ');
  for (const key of ['anyOf', 'oneOf'] as const) if (Array.isArray(s[key])) return (s[key] as unknown[]).map(typeOf).join(' | ');
  const types = Array.isArray(s['type']) ? (s['type'] as string[]) : typeof s['type'] === 'string' ? [s['type']] : [];
  return (
    types
      .map((t) => {
        if (t === 'array') return `array&lt;${typeOf(s['items'])}&gt;`;
        if (t === 'object' && typeof s['additionalProperties'] === 'object') return `map&lt;string, ${typeOf(s['additionalProperties'])}&gt;`;
        return escapeHtml(t);
      })
      .join(' | ') || 'any'
  );
}

function constraints(schema: Json): string {
  const parts: string[] = [];
  const add = (label: string, key: string): void => {
    const v = schema[key];
    if (typeof v === 'number' && Math.abs(v) < 1e15) parts.push(`${label} ${v}`);
  };
  add('≥', 'minimum');
  add('>', 'exclusiveMinimum');
  add('≤', 'maximum');
  add('min length', 'minLength');
  add('max length', 'maxLength');
  add('max items', 'maxItems');
  add('min items', 'minItems');
  if (typeof schema['pattern'] === 'string') parts.push(`pattern <code>${escapeHtml(schema['pattern'])}</code>`);
  if (typeof schema['format'] === 'string') parts.push(`format ${escapeHtml(schema['format'])}`);
  for (const key of ['anyOf', 'oneOf'] as const) {
    if (Array.isArray(schema[key]))
      for (const alt of schema[key] as Json[]) if (typeof alt === 'object' && alt !== null) parts.push(...[constraints(alt)].filter((c) => c !== ''));
  }
  return parts.join(', ');
}

function propertiesTable(schema: Json): string {
  const props = (schema['properties'] ?? {}) as Record<string, Json>;
  const required = new Set((schema['required'] ?? []) as string[]);
  const rows = Object.entries(props).map(([name, p]) => {
    const desc = typeof p['description'] === 'string' ? prose(p['description']) : '';
    const extra = constraints(p);
    return `<tr><td><code>${escapeHtml(name)}</code>${required.has(name) ? ' <span class="req">required</span>' : ''}</td><td class="type">${typeOf(p)}</td><td>${desc}${desc !== '' && extra !== '' ? '<br>' : ''}${extra !== '' ? `<span class="muted">${extra}</span>` : ''}</td></tr>`;
  });
  if (rows.length === 0) return `<p class="muted">${typeOf(schema)}</p>`;
  return `<table class="props"><thead><tr><th>field</th><th>type</th><th>notes</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

function schemaBlock(name: string, schema: Json): string {
  const alternatives = (schema['anyOf'] ?? schema['oneOf']) as Json[] | undefined;
  const body =
    Array.isArray(alternatives) && schema['properties'] === undefined ? `<p>One of: ${alternatives.map(typeOf).join(', ')}</p>` : propertiesTable(schema);
  const desc = typeof schema['description'] === 'string' ? `<p>${escapeHtml(schema['description'])}</p>` : '';
  return `<section class="schema" id="schema-${escapeHtml(name)}"><h3>${escapeHtml(name)}</h3>${desc}${body}</section>`;
}

function mediaSchemas(content: unknown): string {
  if (typeof content !== 'object' || content === null) return '';
  return Object.entries(content as Record<string, Json>)
    .map(([media, m]) => `<span class="media">${escapeHtml(media)}</span> ${m['schema'] !== undefined ? typeOf(m['schema']) : ''}`)
    .join('<br>');
}

/** The request body: its media types, and the properties of its schema inline. */
function requestBody(body: Json, schemas: Record<string, Json>): string {
  const content = (body['content'] ?? {}) as Record<string, Json>;
  const first = Object.values(content)[0]?.['schema'] as Json | undefined;
  const ref = typeof first?.['$ref'] === 'string' ? refName(first['$ref']) : null;
  const schema = ref !== null ? schemas[ref] : undefined;
  const table = schema !== undefined && schema['properties'] !== undefined ? propertiesTable(schema) : '';
  return `<p>${mediaSchemas(content)}</p>${table}`;
}

function operationBlock(path: string, method: string, op: Json, schemas: Record<string, Json>): string {
  const security = (op['security'] ?? []) as Json[];
  const auth = security.length === 0 ? 'none' : security.map((s) => Object.keys(s).join('+')).join(' or ');
  const params = (op['parameters'] ?? []) as Json[];
  const paramRows = params.map(
    (p) =>
      `<tr><td><code>${escapeHtml(String(p['name']))}</code>${p['required'] === true ? ' <span class="req">required</span>' : ''}</td><td>${escapeHtml(String(p['in']))}</td><td class="type">${typeOf(p['schema'])}</td></tr>`,
  );
  const body = op['requestBody'] as Json | undefined;
  const responses = Object.entries((op['responses'] ?? {}) as Record<string, Json>)
    .map(
      ([status, r]) =>
        `<tr><td><span class="status s${status[0] ?? ''}">${escapeHtml(status)}</span></td><td>${escapeHtml(String(r['description'] ?? ''))}</td><td>${mediaSchemas(r['content'])}</td></tr>`,
    )
    .join('');
  const id = String(op['operationId']);
  return `<article class="op" id="op-${escapeHtml(id)}">
  <h3><span class="method ${escapeHtml(method)}">${escapeHtml(method.toUpperCase())}</span> <code class="path">${escapeHtml(path)}</code></h3>
  <p class="summary">${escapeHtml(String(op['summary'] ?? ''))}</p>
  ${typeof op['description'] === 'string' ? `<p>${prose(op['description'])}</p>` : ''}
  <p class="muted">auth: ${escapeHtml(auth)}</p>
  ${paramRows.length > 0 ? `<h4>Parameters</h4><table class="props"><thead><tr><th>name</th><th>in</th><th>type</th></tr></thead><tbody>${paramRows.join('')}</tbody></table>` : ''}
  ${body !== undefined ? `<h4>Request body</h4>${requestBody(body, schemas)}` : ''}
  <h4>Responses</h4><table class="props"><tbody>${responses}</tbody></table>
</article>`;
}

const STYLE = `
:root{--bg:#f6f7f9;--card:#fff;--ink:#1d2330;--muted:#667085;--line:#e4e7ec;--accent:#3b5bdb}
*{box-sizing:border-box}body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:var(--bg)}
header{background:#111827;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#cbd5e1;max-width:1000px}
.wrap{display:flex;gap:24px;padding:24px 28px;align-items:flex-start}
nav{position:sticky;top:16px;min-width:250px;max-height:calc(100vh - 32px);overflow:auto;background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
nav h2{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:12px 0 4px}nav a{display:block;color:var(--ink);text-decoration:none;padding:2px 0;font-size:13px;white-space:nowrap}nav a:hover{color:var(--accent)}
main{flex:1;min-width:0}h2.tag{margin:8px 0 12px;font-size:18px}
.op,.schema{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;margin-bottom:14px}
.op h3{margin:0;font-size:16px;font-weight:600}.op h4{margin:12px 0 4px;font-size:13px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.summary{margin:6px 0 0;font-weight:500}.muted{color:var(--muted)}
.method{display:inline-block;min-width:62px;text-align:center;border-radius:6px;color:#fff;font-size:12px;font-weight:700;padding:2px 6px;margin-right:6px}
.method.get{background:#2f9e44}.method.post{background:#1c7ed6}.method.delete{background:#e03131}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f1f3f5;border-radius:4px;padding:0 3px}.path{font-size:14px;background:none}
table.props{border-collapse:collapse;width:100%;margin-top:4px}.props th,.props td{text-align:left;border-top:1px solid var(--line);padding:5px 8px;vertical-align:top}.props th{font-size:12px;color:var(--muted);font-weight:600}
.type{white-space:nowrap}.type a,.props a{color:var(--accent)}.req{color:#c92a2a;font-size:11px}
.status{font-weight:700}.s2{color:#2f9e44}.s4{color:#e8590c}.s5{color:#c92a2a}.media{color:var(--muted);font-size:12px}
`;

/** The reference page of an OpenAPI document. */
export function renderDocsPage(spec: Json): string {
  const info = (spec['info'] ?? {}) as Json;
  const paths = (spec['paths'] ?? {}) as Record<string, Record<string, Json>>;
  const byTag = new Map<string, { path: string; method: string; op: Json }[]>();
  for (const [path, methods] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const tag = ((op['tags'] ?? ['Other']) as string[])[0] ?? 'Other';
      byTag.set(tag, [...(byTag.get(tag) ?? []), { path, method, op }]);
    }
  }
  const schemas = (((spec['components'] ?? {}) as Json)['schemas'] ?? {}) as Record<string, Json>;
  const nav = [...byTag.entries()]
    .map(
      ([tag, ops]) =>
        `<h2>${escapeHtml(tag)}</h2>${ops.map(({ path, method, op }) => `<a href="#op-${escapeHtml(String(op['operationId']))}"><span class="method ${escapeHtml(method)}" style="min-width:46px;font-size:10px">${escapeHtml(method.toUpperCase())}</span>${escapeHtml(path)}</a>`).join('')}`,
    )
    .join('');
  const sections = [...byTag.entries()]
    .map(([tag, ops]) => `<h2 class="tag">${escapeHtml(tag)}</h2>${ops.map(({ path, method, op }) => operationBlock(path, method, op, schemas)).join('')}`)
    .join('');
  const schemaNav = Object.keys(schemas)
    .sort()
    .map((n) => `<a href="#schema-${escapeHtml(n)}">${escapeHtml(n)}</a>`)
    .join('');
  const schemaSections = Object.keys(schemas)
    .sort()
    .map((n) => schemaBlock(n, schemas[n] as Json))
    .join('');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(String(info['title'] ?? 'API'))} — API reference</title><style>${STYLE}</style></head><body>
<header><h1>${escapeHtml(String(info['title'] ?? 'API'))} <span style="font-weight:400;color:#94a3b8">${escapeHtml(String(info['version'] ?? ''))} · OpenAPI ${escapeHtml(String(spec['openapi'] ?? ''))}</span></h1><p>${escapeHtml(String(info['description'] ?? ''))} The machine-readable document: <a style="color:#93c5fd" href="/openapi.json">/openapi.json</a>.</p></header>
<div class="wrap"><nav>${nav}<h2>Schemas</h2>${schemaNav}</nav><main>${sections}<h2 class="tag">Schemas</h2>${schemaSections}</main></div>
</body></html>`;
}
