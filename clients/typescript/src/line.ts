// One replay line (docs/replay-format.md) for a part of the AI SDK's `fullStream`:
// the part as JSON, unchanged except for what JSON cannot carry.

/** A generated file (`GeneratedFile`): read through its public getters. */
function isGeneratedFile(v: unknown): v is { mediaType: string; base64: string; type?: string; providerMetadata?: unknown } {
  return (
    v !== null &&
    typeof v === 'object' &&
    'base64Data' in v &&
    'uint8ArrayData' in v &&
    'mediaType' in v
  );
}

function base64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/**
 * A part as one line of the replay format, ending in a newline:
 * - an `Error` as `{name, message, ...its own enumerable fields}`;
 * - bytes (`Uint8Array`, `ArrayBuffer`) as base64;
 * - a generated file as `{type?, mediaType, base64, providerMetadata?}`;
 * - `Date` and `URL` as their JSON strings.
 */
export function toReplayLine(part: unknown): string {
  return (
    JSON.stringify(part, function replacer(_key, v: unknown) {
      if (v instanceof Error) {
        const out: Record<string, unknown> = { name: v.name, message: v.message };
        for (const key of Object.keys(v)) out[key] = (v as unknown as Record<string, unknown>)[key];
        return out;
      }
      if (isGeneratedFile(v)) {
        return { type: v.type, mediaType: v.mediaType, base64: v.base64, providerMetadata: v.providerMetadata };
      }
      if (v instanceof Uint8Array) return base64(v);
      if (v instanceof ArrayBuffer) return base64(new Uint8Array(v));
      return v;
    }) + '\n'
  );
}
