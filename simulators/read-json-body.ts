// The body of a call to a vendor simulator, read up to the simulator's cap: raw (Anthropic, OpenAI)
// or as a JSON object (Ark's create, Gemini's generateContent), where what the vendor refuses as a
// malformed body comes back undefined, for the simulator to answer in its vendor's words.
import type { IncomingMessage } from 'node:http';

/** The body as a JSON object; undefined past `maxBytes` (the rest is not read), or when it is not JSON or not an object. */
export async function readJsonObject(req: IncomingMessage, maxBytes: number): Promise<Record<string, unknown> | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > maxBytes) return undefined;
    chunks.push(c);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
  } catch {
    return undefined;
  }
  return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
}

/** The raw body, or undefined once it passes maxBytes (the rest is read and dropped); rejects when the client leaves mid-upload. */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size > maxBytes) {
        over = true;
        chunks.length = 0;
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!over) resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
    req.on('error', reject);
    req.on('close', () => {
      if (!req.complete && !over) reject(new Error('client left during the upload'));
    });
  });
}
