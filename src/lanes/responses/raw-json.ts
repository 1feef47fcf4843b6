// Small readers of the Responses lane's JSON: checked field reads of parsed events, and a scan
// that reads one integer field from an event's raw JSON text without parsing it (the hot path).

/** A non-negative safe integer, or undefined (not reported: never read as 0). */
export function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Reads `"<key>":N` (key given with its quotes and colon) from raw JSON without parsing it (the key cannot occur unescaped inside a string). */
export function scanCount(data: string, key: string): number {
  const at = data.indexOf(key);
  if (at === -1) return -1;
  let i = at + key.length;
  while (data.charCodeAt(i) === 32) i++;
  let n = 0;
  let digits = 0;
  for (;;) {
    const c = data.charCodeAt(i);
    if (c < 48 || c > 57) break;
    n = n * 10 + (c - 48);
    digits++;
    i++;
    if (digits > 15) return -1;
  }
  return digits === 0 ? -1 : n;
}
