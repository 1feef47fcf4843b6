// A small SSE reader for assertions on the raw wire (LF, CRLF or CR line endings).
export interface SseEvent {
  event: string;
  data: string;
}

export function parseSse(text: string): SseEvent[] {
  const out: SseEvent[] = [];
  for (const block of text.split(/\r\n\r\n|\n\n|\r\r/)) {
    if (block.trim() === '') continue;
    let event = 'message';
    const data: string[] = [];
    for (const line of block.split(/\r\n|\n|\r/)) {
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i === -1 ? line : line.slice(0, i);
      const value = i === -1 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length > 0 || event !== 'message') out.push({ event, data: data.join('\n') });
  }
  return out;
}

/** SSE comment lines (`: ...`) in order, for the Responses usage frame. */
export function sseComments(text: string): string[] {
  return text
    .split(/\r\n|\n|\r/)
    .filter((l) => l.startsWith(':'))
    .map((l) => l.slice(1).trimStart());
}
