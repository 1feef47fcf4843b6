// The JSON body of a call to a vendor simulator (Ark's create, Gemini's generateContent): read up to
// the simulator's cap and parsed; what the vendor refuses as a malformed body comes back undefined,
// for the simulator to answer in its vendor's words.
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
