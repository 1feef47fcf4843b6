// The console's only script: copy buttons, and the playground's streamed reply. Every page works
// without it (the playground then answers in one piece). It never reads or stores a key.
// biome-ignore lint/suspicious/noRedundantUseStrict: loaded by a classic <script defer>, not as a module
'use strict';
document.addEventListener('click', (e) => {
  const b = e.target.closest?.('button[data-copy]');
  if (!b) return;
  const field = document.getElementById(b.getAttribute('data-copy'));
  if (!field) return;
  field.select();
  (navigator.clipboard ? navigator.clipboard.writeText(field.value) : Promise.reject(new Error('no clipboard'))).then(
    () => {
      b.textContent = 'Copied';
    },
    () => {
      document.execCommand('copy');
      b.textContent = 'Copied';
    },
  );
});

const form = document.getElementById('playground');
if (form) {
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const data = Object.fromEntries(new FormData(form).entries());
    const section = document.getElementById('result');
    const reply = document.getElementById('reply');
    const set = (id, text) => {
      document.getElementById(id).textContent = text;
    };
    section.hidden = false;
    reply.textContent = '';
    set('charged', '…');
    set('request-id', '…');
    set('status', '…');
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      const res = await fetch('/console/playground/stream', {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-csrf-token': data.csrf },
        body: JSON.stringify(data),
      });
      set('status', String(res.status));
      const rid = res.headers.get('x-service-request-id');
      if (rid) set('request-id', rid);
      if (!res.ok || !(res.headers.get('content-type') || '').startsWith('text/event-stream')) {
        const text = await res.text();
        try {
          const j = JSON.parse(text);
          reply.textContent = (j.error && j.error.code + ': ' + j.error.message) || text;
        } catch {
          reply.textContent = text.replace(/<[^>]*>/g, ' ').trim();
        }
        set('charged', '—');
        return;
      }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          onEvent(buf.slice(0, i), reply, set);
          buf = buf.slice(i + 2);
        }
      }
      if (buf.trim()) onEvent(buf, reply, set);
    } catch (err) {
      reply.textContent += '\n[' + String(err) + ']';
    } finally {
      button.disabled = false;
    }
  });
}

/** One server-sent event: a text delta (either protocol), the service.usage charge, or an error. */
function onEvent(block, reply, set) {
  for (const line of block.split('\n')) {
    let json = null;
    if (line.startsWith('data: ')) json = line.slice(6);
    else if (line.startsWith(': service.usage ')) json = line.slice(16);
    if (json === null) continue;
    let ev;
    try {
      ev = JSON.parse(json);
    } catch {
      continue;
    }
    if (ev.type === 'content_block_delta' && ev.delta && ev.delta.type === 'text_delta') reply.textContent += ev.delta.text;
    else if (ev.type === 'response.output_text.delta' && typeof ev.delta === 'string') reply.textContent += ev.delta;
    else if (ev.type === 'service.usage') {
      set('charged', ev.ink_charged + ' Ink');
      if (ev.request_id) set('request-id', ev.request_id);
    } else if (ev.type === 'error' && ev.error) reply.textContent += '\n[' + (ev.error.code || ev.error.type) + ': ' + ev.error.message + ']';
  }
}
