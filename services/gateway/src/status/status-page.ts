/**
 * @module status/status-page
 * The status page as one server-rendered HTML document: CSS inline, no script, nothing fetched
 * from elsewhere; it reloads itself every STATUS_REFRESH_S seconds. Readable at a glance: health
 * and traffic tiles on top, then queues and workers (operators), then one card per tenant with its
 * documents (progress bars while encoding) and batches (progress of their lines).
 */
import { escapeHtml } from '../openapi/docs-page.js';
import type { BatchObject } from '../batch/batch-object.js';
import type { DocumentRow, StatusData, TenantStatus } from './status-data.js';
import type { LatencySummary } from './traffic-window.js';

export const STATUS_REFRESH_S = 5;

const e = escapeHtml;

function fmtInt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

function fmtBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

function fmtSeconds(s: number | null): string {
  if (s === null) return '–';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  return `${s.toFixed(s < 10 ? 2 : 1)} s`;
}

function fmtDuration(s: number): string {
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function ago(nowMs: number, atS: number): string {
  return `${fmtDuration(Math.max(0, nowMs / 1000 - atS))} ago`;
}

function pill(text: string, tone: 'ok' | 'bad' | 'warn' | 'info' | 'muted'): string {
  return `<span class="pill ${tone}">${e(text)}</span>`;
}

function bar(fraction: number, tone = 'info', label = ''): string {
  const pct = Math.max(0, Math.min(100, fraction * 100));
  return `<div class="bar"><div class="fill ${tone}" style="width:${pct.toFixed(1)}%"></div><span>${e(label)}</span></div>`;
}

function tile(label: string, value: string, sub = ''): string {
  return `<div class="tile"><div class="label">${e(label)}</div><div class="value">${value}</div><div class="sub">${sub}</div></div>`;
}

function latencyTile(label: string, l: LatencySummary): string {
  return tile(label, `${fmtSeconds(l.p50S)}`, `p50 · p95 ${fmtSeconds(l.p95S)} · ${fmtInt(l.count)} obs.`);
}

const BATCH_TONE: Record<string, 'ok' | 'bad' | 'warn' | 'info' | 'muted'> = {
  validating: 'muted',
  in_progress: 'info',
  finalizing: 'info',
  completed: 'ok',
  failed: 'bad',
  expired: 'warn',
  cancelling: 'warn',
  cancelled: 'muted',
};

function batchRow(b: BatchObject, nowMs: number): string {
  const { total, completed, failed } = b.request_counts;
  const done = completed + failed;
  const label = total > 0 ? `${fmtInt(done)} / ${fmtInt(total)}${failed > 0 ? ` · ${fmtInt(failed)} failed` : ''}` : 'reading input';
  return `<tr><td><code>${e(b.id)}</code></td><td>${e(b.endpoint.replace('/v1/', ''))}</td><td>${pill(b.status.replace('_', ' '), BATCH_TONE[b.status] ?? 'muted')}</td><td class="wide">${bar(total > 0 ? done / total : 0, failed > 0 && completed === 0 ? 'bad' : 'ok', label)}</td><td class="num">${fmtInt(b.usage.output_tokens)}</td><td class="muted">${e(ago(nowMs, b.created_at))}</td></tr>`;
}

function docRows(t: TenantStatus): string {
  const rows: string[] = [];
  for (const d of t.encoding) {
    const frac = d.tokens !== null && d.tokens > 0 ? (d.tokensDone ?? 0) / d.tokens : 0;
    rows.push(
      `<tr><td><code>${e(d.id)}</code></td><td>${pill('encoding', 'info')}</td><td class="wide">${bar(frac, 'info', `${fmtInt(d.tokensDone ?? 0)} / ${d.tokens !== null ? fmtInt(d.tokens) : '?'} tokens`)}</td></tr>`,
    );
  }
  for (const d of t.queued.slice(0, 10))
    rows.push(
      `<tr><td><code>${e(d.id)}</code></td><td>${pill('queued', 'muted')}</td><td class="wide muted">${d.tokens !== null ? `${fmtInt(d.tokens)} tokens` : ''}</td></tr>`,
    );
  for (const d of t.failed)
    rows.push(`<tr><td><code>${e(d.id)}</code></td><td>${pill('failed', 'bad')}</td><td class="wide muted">${e(d.reason ?? '')}</td></tr>`);
  for (const d of t.ready) rows.push(readyRow(d));
  return rows.join('');
}

function readyRow(d: DocumentRow): string {
  const size = d.tokens !== null ? `${fmtInt(d.tokens)} tokens${d.bytes !== undefined ? ` · ${fmtBytes(d.bytes)}` : ''}` : '';
  return `<tr><td><code>${e(d.id)}</code></td><td>${pill('ready', 'ok')}</td><td class="wide muted">${size}</td></tr>`;
}

function tenantCard(t: TenantStatus, nowMs: number): string {
  const counts = [`${fmtInt(t.readyCount)} ready`, `${t.encoding.length} encoding`, `${t.queued.length} queued`, `${t.failed.length} failed`].join(' · ');
  const docs = docRows(t);
  const batches = t.batches.map((b) => batchRow(b, nowMs)).join('');
  return `<section class="card tenant"><h2>Tenant <code>${e(t.tenant)}</code></h2>
<h3>Documents <span class="muted">${counts}</span></h3>
${docs !== '' ? `<table class="docs"><tbody>${docs}</tbody></table>` : '<p class="muted">No documents.</p>'}
<h3>Batches</h3>
${batches !== '' ? `<table><thead><tr><th>batch</th><th>endpoint</th><th>status</th><th>lines</th><th class="num">output tokens</th><th>created</th></tr></thead><tbody>${batches}</tbody></table>` : '<p class="muted">No batches.</p>'}
</section>`;
}

const STYLE = `
:root{--bg:#f4f6f9;--card:#fff;--ink:#172033;--muted:#6b7689;--line:#e3e7ee}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--ink)}
header{background:#0f172a;color:#e2e8f0;padding:16px 28px;display:flex;align-items:center;gap:18px;flex-wrap:wrap}
header h1{margin:0;font-size:19px;color:#fff}header .meta{color:#94a3b8;font-size:13px}header .right{margin-left:auto;display:flex;gap:8px}
main{padding:20px 28px;max-width:1400px}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:12px;margin-bottom:18px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.tile .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}.tile .value{font-size:24px;font-weight:650;margin-top:2px}.tile .sub{font-size:12px;color:var(--muted)}
.grid{display:grid;grid-template-columns:3fr 2fr;gap:16px;margin-bottom:16px}@media(max-width:1000px){.grid{grid-template-columns:1fr}}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;margin-bottom:16px}
.card h2{margin:0 0 8px;font-size:16px}.card h3{font-size:13px;margin:14px 0 6px;color:#334155}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 8px;border-top:1px solid var(--line);vertical-align:middle}
th{font-size:12px;color:var(--muted);font-weight:600;border-top:none}table.docs td:first-child{width:34%}table.docs td:nth-child(2){width:110px}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.wide{width:45%}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace}.muted{color:var(--muted)}
.pill{display:inline-block;border-radius:999px;padding:1px 9px;font-size:12px;font-weight:600}
.pill.ok{background:#d3f9d8;color:#2b8a3e}.pill.bad{background:#ffe3e3;color:#c92a2a}.pill.warn{background:#fff3bf;color:#a66a00}.pill.info{background:#dbe4ff;color:#364fc7}.pill.muted{background:#eceff3;color:#556070}
.bar{position:relative;height:20px;background:#edf0f5;border-radius:6px;overflow:hidden}.bar .fill{height:100%}.bar span{position:absolute;left:8px;top:1px;font-size:12px;color:#1e293b}
.fill.ok{background:#8ce99a}.fill.info{background:#91a7ff}.fill.bad{background:#ffa8a8}.fill.warn{background:#ffd43b}
.alert{background:#fff4e6;border:1px solid #ffd8a8;color:#9c4a00;border-radius:10px;padding:10px 14px;margin-bottom:16px}
`;

export function renderStatusPage(s: StatusData): string {
  const nowMs = s.generatedAtMs;
  const scope = s.scope.kind === 'operator' ? 'operator · all tenants' : `tenant ${s.scope.tenant}`;
  const health = [
    pill(s.checks.redis ? 'Redis ok' : 'Redis down', s.checks.redis ? 'ok' : 'bad'),
    pill(s.checks.store ? 'store ok' : 'store down', s.checks.store ? 'ok' : 'bad'),
  ].join('');
  const parts: string[] = [];
  if (s.unavailable.length > 0) parts.push(`<div class="alert"><b>Partly unavailable.</b> ${s.unavailable.map(e).join('; ')}</div>`);
  const docsTotal = s.tenants.reduce((a, t) => a + t.readyCount, 0);
  const encoding = s.tenants.reduce((a, t) => a + t.encoding.length, 0);
  const batchesRunning = s.tenants.reduce((a, t) => a + t.batches.filter((b) => !['completed', 'failed', 'expired', 'cancelled'].includes(b.status)).length, 0);
  const tiles: string[] = [];
  if (s.traffic !== null) {
    const t = s.traffic;
    tiles.push(tile('Output tokens / s', t.completionTokensPerS.toFixed(1), `prompt ${t.promptTokensPerS.toFixed(1)} / s · last ${fmtDuration(t.spanS)}`));
    tiles.push(tile('Requests', fmtInt(t.requests), `finished in the last ${fmtDuration(t.spanS)}`));
    tiles.push(latencyTile('Time to first token', t.ttft));
    tiles.push(latencyTile('End to end', t.e2e));
    tiles.push(latencyTile('Between tokens', t.interToken));
  }
  if (s.queues !== null) {
    const workers = (q: string): number => s.queues?.find((x) => x.queue === q)?.workers ?? 0;
    tiles.push(tile('Workers alive', `${workers('prefill')} + ${workers('decode')}`, `encoders + decoders · ${workers('batch')} gateway batch drivers`));
  }
  tiles.push(tile('Documents', fmtInt(docsTotal), `ready · ${encoding} encoding`));
  tiles.push(tile('Batches running', fmtInt(batchesRunning), `of the ${s.tenants.reduce((a, t) => a + t.batches.length, 0)} newest listed`));
  parts.push(`<div class="tiles">${tiles.join('')}</div>`);
  if (s.queues !== null && s.workers !== null) {
    const maxBacklog = Math.max(1, ...s.queues.map((q) => q.waiting + q.prioritized + q.delayed));
    const qrows = s.queues
      .map((q) => {
        const backlog = q.waiting + q.prioritized + q.delayed;
        return `<tr><td><b>${e(q.queue)}</b></td><td class="num">${fmtInt(q.waiting)}</td><td class="num">${fmtInt(q.prioritized)}</td><td class="num">${fmtInt(q.delayed)}</td><td class="num">${fmtInt(q.active)}</td><td class="num">${q.failed > 0 ? `<span style="color:#c92a2a">${fmtInt(q.failed)}</span>` : '0'}</td><td class="wide">${bar(backlog / maxBacklog, backlog > 0 ? 'warn' : 'ok', `${fmtInt(backlog)} waiting${q.backlogTokens !== undefined ? ` · ${fmtInt(q.backlogTokens)} tokens` : ''}`)}</td></tr>`;
      })
      .join('');
    const wrows =
      s.workers.length === 0
        ? '<tr><td colspan="4" class="muted">No worker is connected.</td></tr>'
        : s.workers
            .map(
              (w) =>
                `<tr><td>${e(w.queue)}</td><td><code>${e(w.addr)}</code></td><td class="num">${e(fmtDuration(w.ageS))}</td><td class="num">${e(fmtDuration(w.idleS))}</td></tr>`,
            )
            .join('');
    parts.push(`<div class="grid"><section class="card"><h2>Queues</h2><table><thead><tr><th>queue</th><th class="num">waiting</th><th class="num">prioritized</th><th class="num">delayed</th><th class="num">running</th><th class="num">failed</th><th>backlog</th></tr></thead><tbody>${qrows}</tbody></table></section>
<section class="card"><h2>Workers</h2><table><thead><tr><th>queue</th><th>connection</th><th class="num">up</th><th class="num">idle</th></tr></thead><tbody>${wrows}</tbody></table></section></div>`);
  }
  parts.push(...s.tenants.map((t) => tenantCard(t, nowMs)));
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta http-equiv="refresh" content="${STATUS_REFRESH_S}"><title>csa2-serve status</title><style>${STYLE}</style></head><body>
<header><h1>csa2-serve</h1><span class="meta">model <b>${e(s.model)}</b> · ${e(scope)} · gateway up ${e(fmtDuration(s.uptimeS))} · ${e(new Date(nowMs).toISOString().replace('T', ' ').slice(0, 19))} UTC</span><span class="right">${health}</span></header>
<main>${parts.join('\n')}<p class="muted">Refreshes every ${STATUS_REFRESH_S} s.${s.traffic !== null ? " Traffic figures are this gateway's." : ''} <a href="/docs">API reference</a> · <a href="/status.json">JSON</a></p></main>
</body></html>`;
}

/** The page answered without a key: the browser asks for one (Basic: the key as the password). */
export function renderLoginPage(): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>csa2-serve status</title><style>${STYLE}</style></head><body><header><h1>csa2-serve</h1></header><main><section class="card"><h2>A key is needed</h2><p>Sign in with an operator key (CSA2_OPERATOR_KEYS) to see every tenant, or with an API key to see your own documents and batches. In a browser, give the key as the password (any user name); from a script, send <code>Authorization: Bearer &lt;key&gt;</code>.</p></section></main></body></html>`;
}
