// Pixel size of a stored image, read from its header (PNG IHDR, JPEG SOFn, WebP VP8/VP8L/VP8X).
// undefined when the bytes are not one of these or the header is cut short: the record then shows
// no width/height rather than a guess.

export interface PixelSize {
  readonly width: number;
  readonly height: number;
  /** The format the bytes are, whatever the vendor's label said. */
  readonly contentType: 'image/png' | 'image/jpeg' | 'image/webp';
}

const MAX_JPEG_SCAN_BYTES = 4 * 1024 * 1024;

function png(bytes: Buffer): PixelSize | undefined {
  if (bytes.length < 24 || bytes.readUInt32BE(0) !== 0x89504e47 || bytes.readUInt32BE(4) !== 0x0d0a1a0a || bytes.toString('latin1', 12, 16) !== 'IHDR')
    return undefined;
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20), contentType: 'image/png' };
}

function jpeg(bytes: Buffer): PixelSize | undefined {
  if (bytes.length < 4 || bytes[0] !== 0xff || bytes[1] !== 0xd8) return undefined;
  const end = Math.min(bytes.length, MAX_JPEG_SCAN_BYTES);
  let i = 2;
  while (i + 4 <= end) {
    if (bytes[i] !== 0xff) return undefined;
    const marker = bytes[i + 1]!;
    if (marker === 0xff) {
      i++;
      continue;
    }
    if (marker === 0xd9 || marker === 0xda) return undefined; // end of image / start of scan before a frame header
    const len = bytes.readUInt16BE(i + 2);
    // SOF0..SOF15 except DHT (C4), JPG (C8), DAC (CC)
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (i + 9 > end) return undefined;
      return { height: bytes.readUInt16BE(i + 5), width: bytes.readUInt16BE(i + 7), contentType: 'image/jpeg' };
    }
    i += 2 + len;
  }
  return undefined;
}

function webp(bytes: Buffer): PixelSize | undefined {
  if (bytes.length < 30 || bytes.toString('latin1', 0, 4) !== 'RIFF' || bytes.toString('latin1', 8, 12) !== 'WEBP') return undefined;
  const kind = bytes.toString('latin1', 12, 16);
  if (kind === 'VP8X') return { width: 1 + bytes.readUIntLE(24, 3), height: 1 + bytes.readUIntLE(27, 3), contentType: 'image/webp' };
  if (kind === 'VP8 ') return { width: bytes.readUInt16LE(26) & 0x3fff, height: bytes.readUInt16LE(28) & 0x3fff, contentType: 'image/webp' };
  if (kind === 'VP8L') {
    const bits = bytes.readUInt32LE(21);
    return { width: 1 + (bits & 0x3fff), height: 1 + ((bits >> 14) & 0x3fff), contentType: 'image/webp' };
  }
  return undefined;
}

export function imagePixelSize(bytes: Buffer): PixelSize | undefined {
  const s = png(bytes) ?? jpeg(bytes) ?? webp(bytes);
  return s !== undefined && s.width > 0 && s.height > 0 ? s : undefined;
}
