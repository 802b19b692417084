// The prompt a model receives when an app continues a conversation: reads, on stdin, a
// JSON array of `{sdk: "v5" | "v6" | "v7", messages: ModelMessage[], followUp: string}`,
// sends each `[...messages, {role: 'user', content: followUp}]` with `streamText` of that
// SDK major to a mock model that records its prompt, and writes the prompts (the
// `LanguageModelV*Prompt` each received) as a JSON array on stdout. A request the SDK
// refuses (an invalid message) is `{error: "..."}` in its place.
//
// Usage: node next-prompt.mjs < requests.json > prompts.json

import { readFileSync } from 'node:fs';

const sdks = {
  v5: { ai: await import('ai5'), Mock: (await import('ai5/test')).MockLanguageModelV2, v2: true },
  v6: { ai: await import('ai6'), Mock: (await import('ai6/test')).MockLanguageModelV3, v2: false },
  v7: { ai: await import('ai7'), Mock: (await import('ai7/test')).MockLanguageModelV4, v2: false },
};

function answer(sdk) {
  const usage = sdk.v2
    ? { inputTokens: 1, outputTokens: 1, totalTokens: 2 }
    : {
        inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 1, text: 1, reasoning: 0 },
      };
  const chunks = [
    { type: 'stream-start', warnings: [] },
    { type: 'text-start', id: 't' },
    { type: 'text-delta', id: 't', delta: 'ok' },
    { type: 'text-end', id: 't' },
    { type: 'finish', finishReason: sdk.v2 ? 'stop' : { unified: 'stop', raw: 'stop' }, usage },
  ];
  return new ReadableStream({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk);
      c.close();
    },
  });
}

/** The prompt the mock model receives for `messages`, as JSON (bytes as base64). */
export async function promptOf(tag, messages) {
  const sdk = sdks[tag];
  if (!sdk) throw new Error(`unknown SDK major ${tag}`);
  let prompt;
  const model = new sdk.Mock({
    doStream: async (options) => {
      prompt = options.prompt;
      return { stream: answer(sdk) };
    },
  });
  let failure;
  const result = sdk.ai.streamText({ model, messages, onError: ({ error }) => (failure = error) });
  for await (const part of result.fullStream) {
    if (part.type === 'error') failure ??= part.error;
  }
  if (prompt === undefined) return { error: String(failure?.message ?? failure ?? 'no request was made') };
  return JSON.parse(
    JSON.stringify(prompt, (_k, v) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v)),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const requests = JSON.parse(readFileSync(0, 'utf8'));
  const out = [];
  for (const r of requests) {
    out.push(await promptOf(r.sdk, [...r.messages, { role: 'user', content: r.followUp }]));
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
