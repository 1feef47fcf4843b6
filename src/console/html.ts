// Server-rendered HTML for the console: one escaping function that every interpolated value goes
// through, the page frame, and the headers every console answer carries (a strict CSP: scripts
// and styles only from /console/static, no inline code, no framing, forms only to ourselves).
import type { HttpContext } from '../server/http-context.js';

const ESC: Readonly<Record<string, string>> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for an HTML element body or a quoted attribute value. */
export function esc(value: unknown): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESC[c]!);
}

export const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/**
 * Headers on every console answer. Referrer-Policy same-origin: a sign-in token in the address never
 * leaves in a Referer to another site, while our own form posts still carry their Origin (which
 * no-referrer would blank to "null", leaving nothing to check).
 */
export const SECURITY_HEADERS: ReadonlyArray<readonly [string, string]> = Object.freeze([
  ['Content-Security-Policy', CSP],
  ['X-Content-Type-Options', 'nosniff'],
  ['X-Frame-Options', 'DENY'],
  ['Referrer-Policy', 'same-origin'],
  ['Cross-Origin-Opener-Policy', 'same-origin'],
] as const);

export interface PageOptions {
  title: string;
  /** Current section, for the navigation's aria-current. */
  nav?: string;
  /** Signed in: the CSRF token for the sign-out form. */
  csrf?: string;
  accountName?: string;
  scripts?: readonly string[];
}

const NAV: ReadonlyArray<readonly [string, string]> = [
  ['overview', 'Overview'],
  ['keys', 'API keys'],
  ['usage', 'Usage'],
  ['billing', 'Billing'],
  ['playground', 'Playground'],
  ['reference', 'Reference'],
];

const navHref = (id: string): string => (id === 'overview' ? '/console' : `/console/${id}`);

export function page(options: PageOptions, body: string): string {
  const nav =
    options.csrf === undefined
      ? ''
      : `<nav aria-label="Console"><ul>${NAV.map(([id, label]) => `<li><a href="${navHref(id)}"${options.nav === id ? ' aria-current="page"' : ''}>${label}</a></li>`).join('')}</ul>
<form method="post" action="/console/signout" class="signout">${csrfField(options.csrf)}<span>${esc(options.accountName)}</span> <button type="submit">Sign out</button></form></nav>`;
  const scripts = (options.scripts ?? []).map((s) => `<script src="/console/static/${s}" defer></script>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(options.title)} · inkgate console</title><link rel="icon" href="/favicon.ico" type="image/svg+xml"><link rel="stylesheet" href="/console/static/console.css">${scripts}</head>
<body><header><a class="brand" href="/console">inkgate</a>${nav}</header><main id="main"><h1>${esc(options.title)}</h1>
${body}</main></body></html>`;
}

export const csrfField = (token: string): string => `<input type="hidden" name="csrf" value="${esc(token)}">`;

/** Ink with thousands separators (a figure, not a string with units). */
export const ink = (n: number | string | null | undefined): string => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));

export const time = (date: Date | null | undefined): string =>
  date ? `<time datetime="${date.toISOString()}">${date.toISOString().slice(0, 19).replace('T', ' ')}</time>` : '—';

export function table(head: readonly string[], rows: readonly string[][], caption?: string): string {
  if (rows.length === 0) return `<p class="empty">${esc(caption ? `No ${caption.toLowerCase()} yet.` : 'Nothing yet.')}</p>`;
  return `<div class="scroll"><table>${caption ? `<caption>${esc(caption)}</caption>` : ''}<thead><tr>${head.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join('')}</tr>`)
    .join('')}</tbody></table></div>`;
}

export function sendHtml(ctx: HttpContext, status: number, html: string, extra: ReadonlyArray<readonly [string, string]> = []): void {
  const headers = [...SECURITY_HEADERS, ['Content-Type', 'text/html; charset=utf-8'] as const, ...extra];
  if (ctx.method === 'HEAD') return ctx.sendHead(status, headers, Buffer.byteLength(html));
  ctx.startStream(status, headers);
  ctx.end(html);
}

/** 303 See Other: after a form post the browser loads the page with GET. */
export function redirect(ctx: HttpContext, location: string, extra: ReadonlyArray<readonly [string, string]> = []): void {
  if (ctx.done) return;
  ctx.startStream(303, [...SECURITY_HEADERS, ['Location', location], ...extra]);
  ctx.end();
}
