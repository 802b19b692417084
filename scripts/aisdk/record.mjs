// Records the AI SDK's `streamText(...).fullStream` parts as forge-store replay fixtures.
//
// One script, three SDK majors: `ai5`, `ai6` and `ai7` (npm:ai@5.x, 6.x, 7.x), each driven with
// the mock language model shipped in its own `ai/test` module. Every part the SDK emits is
// written as one JSON line, unchanged except for what JSON cannot carry:
//   - Error objects  -> {name, message, ...own enumerable fields} (recursively, e.g. `cause`)
//   - Uint8Array     -> base64 string
//   - Date           -> ISO string (Date#toJSON)
//   - URL            -> string (URL#toJSON)
//   - GeneratedFile  -> {type?, mediaType, base64, providerMetadata?} (its public getters)
//
// Usage: npm ci && node record.mjs [scenario ...]
// Output: ../../examples/streams/aisdk/v5|v6|v7/<scenario>.jsonl, and <scenario>.next.json beside each

import { mkdirSync, readFileSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { promptOf } from './next-prompt.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const outRoot = join(here, '..', '..', 'examples', 'streams', 'aisdk');

// ---------------------------------------------------------------------------------------
// The two SDKs and what differs between their provider (mock model) specifications.

function pkgVersion(alias) {
  return JSON.parse(readFileSync(join(here, 'node_modules', alias, 'package.json'), 'utf8')).version;
}

const PNG_1x1 = Uint8Array.from(
  Buffer.from(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
    'base64',
  ),
);
const FIXED_DATE = new Date('2025-01-01T00:00:00.000Z');

async function loadSdks() {
  const ai5 = await import('ai5');
  const test5 = await import('ai5/test');
  const ai6 = await import('ai6');
  const test6 = await import('ai6/test');
  const ai7 = await import('ai7');
  const test7 = await import('ai7/test');
  return [
    {
      tag: 'v5',
      version: pkgVersion('ai5'),
      ai: ai5,
      mockName: 'MockLanguageModelV2',
      Mock: test5.MockLanguageModelV2,
      supports: { approval: false, reasoningFile: false },
      // LanguageModelV2Usage: flat numbers
      usage: ({ input, output, reasoning = undefined, cached = undefined }) => ({
        inputTokens: input,
        outputTokens: output,
        totalTokens: input + output,
        ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}),
        ...(cached !== undefined ? { cachedInputTokens: cached } : {}),
      }),
      // LanguageModelV2FinishReason: a string
      finishReason: (unified, _raw) => unified,
      fileData: (bytes) => ({ data: bytes }),
      providerTool: (ai, name) => ({ type: 'provider-defined', id: `mock.${name}`, name, args: {} }),
    },
    {
      tag: 'v6',
      version: pkgVersion('ai6'),
      ai: ai6,
      mockName: 'MockLanguageModelV3',
      Mock: test6.MockLanguageModelV3,
      supports: { approval: true, reasoningFile: false },
      // LanguageModelV3Usage: nested token details, as V4
      usage: ({ input, output, reasoning = 0, cached = 0 }) => ({
        inputTokens: { total: input, noCache: input - cached, cacheRead: cached, cacheWrite: 0 },
        outputTokens: { total: output, text: output - reasoning, reasoning },
      }),
      // LanguageModelV3FinishReason: {unified, raw}
      finishReason: (unified, raw) => ({ unified, raw }),
      // LanguageModelV3File: data as base64 or bytes, as V2
      fileData: (bytes) => ({ data: bytes }),
      providerTool: (ai, name) => ({ type: 'provider', id: `mock.${name}`, args: {} }),
    },
    {
      tag: 'v7',
      version: pkgVersion('ai7'),
      ai: ai7,
      mockName: 'MockLanguageModelV4',
      Mock: test7.MockLanguageModelV4,
      supports: { approval: true, reasoningFile: true },
      // LanguageModelV4Usage: nested token details
      usage: ({ input, output, reasoning = 0, cached = 0 }) => ({
        inputTokens: { total: input, noCache: input - cached, cacheRead: cached, cacheWrite: 0 },
        outputTokens: { total: output, text: output - reasoning, reasoning },
      }),
      // LanguageModelV4FinishReason: {unified, raw}
      finishReason: (unified, raw) => ({ unified, raw }),
      fileData: (bytes) => ({ data: { type: 'data', data: bytes } }),
      providerTool: (ai, name) => ({ type: 'provider', id: `mock.${name}`, args: {} }),
    },
  ];
}

// ---------------------------------------------------------------------------------------
// Serialization

function serializeError(err) {
  const out = { name: err.name, message: err.message };
  for (const key of Object.keys(err)) {
    out[key] = err[key];
  }
  return out;
}

function isGeneratedFile(v) {
  return v !== null && typeof v === 'object' && 'base64Data' in v && 'uint8ArrayData' in v && 'mediaType' in v;
}

function toJsonLine(value) {
  return JSON.stringify(value, function replacer(_key, v) {
    if (v instanceof Error) return serializeError(v);
    if (isGeneratedFile(v)) {
      // GeneratedFile: its public getters, not the private base64Data/uint8ArrayData caches
      return { type: v.type, mediaType: v.mediaType, base64: v.base64, providerMetadata: v.providerMetadata };
    }
    if (v instanceof Uint8Array) return Buffer.from(v).toString('base64');
    if (v instanceof ArrayBuffer) return Buffer.from(new Uint8Array(v)).toString('base64');
    return v;
  });
}

// ---------------------------------------------------------------------------------------
// Mock model streams

/** A provider stream that enqueues `chunks` one by one (optionally with a delay) and,
 * like a real HTTP body, errors with the abort reason when `abortSignal` fires. An entry
 * `{ throw: err }` makes the stream error with `err` at that point. */
function providerStream(chunks, { delayMs = 0, abortSignal } = {}) {
  let index = 0;
  let onAbort;
  return new ReadableStream({
    start(controller) {
      if (abortSignal) {
        onAbort = () => {
          try {
            controller.error(abortSignal.reason);
          } catch {}
        };
        if (abortSignal.aborted) onAbort();
        else abortSignal.addEventListener('abort', onAbort, { once: true });
      }
    },
    async pull(controller) {
      if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      if (abortSignal?.aborted) return;
      if (index >= chunks.length) {
        abortSignal?.removeEventListener('abort', onAbort);
        controller.close();
        return;
      }
      const chunk = chunks[index++];
      if (chunk && chunk.throw) {
        controller.error(chunk.throw);
        return;
      }
      controller.enqueue(chunk);
    },
  });
}

/** A mock model whose n-th doStream call streams `steps[n]` (an array of provider parts,
 * or a function (options) => array | Promise<stream result>). */
function mockModel(sdk, steps, { delayMs = 0, modelId = 'mock-model' } = {}) {
  let call = 0;
  return new sdk.Mock({
    provider: 'mock-provider',
    modelId,
    doStream: async (options) => {
      const step = steps[Math.min(call++, steps.length - 1)];
      const chunks = typeof step === 'function' ? await step(options) : step;
      return {
        stream: providerStream(chunks, { delayMs, abortSignal: options.abortSignal }),
        request: { body: { mock: true } },
        response: { headers: { 'content-type': 'text/event-stream' } },
      };
    },
  });
}

// Building blocks for provider parts
const P = {
  start: () => [{ type: 'stream-start', warnings: [] }],
  meta: (id) => [{ type: 'response-metadata', id, modelId: 'mock-model', timestamp: FIXED_DATE }],
  text: (id, pieces) => [
    { type: 'text-start', id },
    ...pieces.map((delta) => ({ type: 'text-delta', id, delta })),
    { type: 'text-end', id },
  ],
  /** A text block cut off after its first delta (no `text-end`). */
  unfinishedText: (id, delta) => [
    { type: 'text-start', id },
    { type: 'text-delta', id, delta },
  ],
  reasoning: (id, pieces) => [
    { type: 'reasoning-start', id },
    ...pieces.map((delta) => ({ type: 'reasoning-delta', id, delta })),
    { type: 'reasoning-end', id },
  ],
  toolCall: (toolCallId, toolName, input, { stream = true } = {}) => {
    const json = JSON.stringify(input);
    const half = Math.ceil(json.length / 2);
    return [
      ...(stream
        ? [
            { type: 'tool-input-start', id: toolCallId, toolName },
            { type: 'tool-input-delta', id: toolCallId, delta: json.slice(0, half) },
            { type: 'tool-input-delta', id: toolCallId, delta: json.slice(half) },
            { type: 'tool-input-end', id: toolCallId },
          ]
        : []),
      { type: 'tool-call', toolCallId, toolName, input: json },
    ];
  },
  finish: (sdk, unified, raw, usage) => [
    { type: 'finish', finishReason: sdk.finishReason(unified, raw), usage: sdk.usage(usage) },
  ],
  /** The finish of a step that ends the turn. */
  stop: (sdk, usage = usage1) => P.finish(sdk, 'stop', 'end_turn', usage),
  /** The finish of a step that calls tools. */
  toolUse: (sdk, usage = usage1) => P.finish(sdk, 'tool-calls', 'tool_use', usage),
};

/** One model step: stream start and the metadata of response `respId`, then `parts`
 * (each a provider part or an array of them). */
function step(respId, ...parts) {
  return [...P.start(), ...P.meta(respId), ...parts.flat()];
}

/** Two model steps: a streamed call `call-1` of tool `toolName`, then the answer `text`. */
function toolThenText(sdk, toolName, input, text) {
  return [
    step('resp-1', P.toolCall('call-1', toolName, input), P.toolUse(sdk)),
    step('resp-2', P.text('txt-0', [text]), P.stop(sdk)),
  ];
}

/** An `APICallError` from the mock provider's endpoint: `fields` over the endpoint's url and
 * the request body `{ model: 'mock-model' }`. */
function apiCallError(sdk, fields) {
  return new sdk.ai.APICallError({
    url: 'https://api.example.com/v1/messages',
    requestBodyValues: { model: 'mock-model' },
    ...fields,
  });
}

/** A mock model whose doStream call throws `apiCallError(sdk, fields)`. */
function failingModel(sdk, fields) {
  return mockModel(sdk, [
    async () => {
      throw apiCallError(sdk, fields);
    },
  ]);
}

/** A scenario of a single request: `options` (and `onPart`, called with each part). */
function oneRequest(prompt, options, onPart = undefined) {
  return { prompt, requests: [onPart ? { options, onPart } : { options }] };
}

/** A single request with one tool, `name` (`tool`: its definition): the model calls it with
 * `input`, then (after its result, in a second step) answers `answer`. */
function toolThenAnswer(sdk, prompt, { name, tool, input, answer, options = {}, onPart = undefined }) {
  return oneRequest(
    prompt,
    {
      ...options,
      tools: { [name]: sdk.ai.tool(tool) },
      stopWhen: sdk.ai.stepCountIs(2),
      model: mockModel(sdk, toolThenText(sdk, name, input, answer)),
    },
    onPart,
  );
}

// ---------------------------------------------------------------------------------------
// Tools

function weatherTool(sdk) {
  return sdk.ai.tool({
    description: 'Current weather for a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, temperature: city === 'Paris' ? 18 : 24, unit: 'C' }),
  });
}

function timeTool(sdk) {
  return sdk.ai.tool({
    description: 'Current local time in a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, time: '14:05' }),
  });
}

// ---------------------------------------------------------------------------------------
// Scenarios. Each returns { prompt, requests: [ { label?, options | (prev) => options } ] }
// or { unsupported: 'reason' }.

const usage1 = { input: 12, output: 8 };

const scenarios = {
  'plain-text': (sdk) =>
    oneRequest('Say hello.', {
      model: mockModel(sdk, [step('resp-1', P.text('txt-0', ['Hello', ', ', 'world', '!']), P.stop(sdk))]),
    }),

  'reasoning-text': (sdk) =>
    oneRequest('What is 6 times 7?', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          P.reasoning('rsn-0', ['The user asks for 6*7. ', '6*7 = 42.']),
          P.text('txt-0', ['6 times 7 ', 'is 42.']),
          P.stop(sdk, { input: 20, output: 30, reasoning: 18, cached: 4 }),
        ),
      ]),
    }),

  'multi-step-tools': (sdk) =>
    oneRequest('What is the weather and the time in Paris and Tokyo?', {
      tools: { weather: weatherTool(sdk), time: timeTool(sdk) },
      stopWhen: sdk.ai.stepCountIs(3),
      model: mockModel(sdk, [
        step(
          'resp-1',
          P.text('txt-0', ['Let me look that up.']),
          P.toolCall('call-1', 'weather', { city: 'Paris' }),
          P.toolCall('call-2', 'time', { city: 'Paris' }),
          P.toolUse(sdk, { input: 40, output: 25 }),
        ),
        step(
          'resp-2',
          P.toolCall('call-3', 'weather', { city: 'Tokyo' }),
          P.toolCall('call-4', 'time', { city: 'Tokyo' }, { stream: false }),
          P.toolUse(sdk, { input: 90, output: 20 }),
        ),
        step(
          'resp-3',
          P.text('txt-0', ['Paris: 18°C at 14:05. ', 'Tokyo: 24°C at 14:05.']),
          P.stop(sdk, { input: 140, output: 15, cached: 90 }),
        ),
      ]),
    }),

  // Provider metadata as Anthropic and OpenAI send it: a thinking block whose signature
  // arrives on a last, empty delta; a redacted thinking block (its data in the start's
  // metadata); a text block with an item id on its end; a tool call with metadata; the
  // step's own metadata on its finish.
  'provider-metadata': (sdk) =>
    oneRequest('Think, then look up the weather in Paris.', {
      tools: { weather: weatherTool(sdk) },
      stopWhen: sdk.ai.stepCountIs(2),
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'reasoning-start', id: 'rsn-0', providerMetadata: { anthropic: {} } },
          { type: 'reasoning-delta', id: 'rsn-0', delta: 'The user wants the weather.' },
          { type: 'reasoning-delta', id: 'rsn-0', delta: '', providerMetadata: { anthropic: { signature: 'sig-EqQBCgIYAhIM' } } },
          { type: 'reasoning-end', id: 'rsn-0' },
          { type: 'reasoning-start', id: 'rsn-1', providerMetadata: { anthropic: { redactedData: 'EmwKAhgBEgy3va3pzix' } } },
          { type: 'reasoning-end', id: 'rsn-1' },
          { type: 'text-start', id: 'txt-0', providerMetadata: { openai: { itemId: 'msg_001' } } },
          { type: 'text-delta', id: 'txt-0', delta: 'Let me check.' },
          { type: 'text-end', id: 'txt-0', providerMetadata: { openai: { itemId: 'msg_001', phase: 'final' } } },
          { type: 'tool-call', toolCallId: 'call-1', toolName: 'weather', input: '{"city":"Paris"}', providerMetadata: { openai: { itemId: 'fc_001' } } },
          // the step's own metadata (cache usage), on its finish
          P.toolUse(sdk).map((f) => ({ ...f, providerMetadata: { anthropic: { cacheCreationInputTokens: 0, stopSequence: null } } })),
        ),
        step('resp-2', P.text('txt-1', ['Paris: 18°C.']), P.stop(sdk)),
      ]),
    }),

  // Citations on a text block's end (ai 7): a URL source that is also streamed as a
  // `source` part, and a document cited only here.
  citations: (sdk) =>
    oneRequest('What does the spec say about retries?', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'source', sourceType: 'url', id: 'src-1', url: 'https://example.com/retries', title: 'Retries' },
          { type: 'text-start', id: 'txt-0' },
          { type: 'text-delta', id: 'txt-0', delta: 'Retries back off exponentially.' },
          {
            type: 'text-end',
            id: 'txt-0',
            citations: [
              { source: { type: 'source', sourceType: 'url', id: 'src-1', url: 'https://example.com/retries', title: 'Retries' }, startIndex: 0, endIndex: 31 },
              { source: { type: 'source', sourceType: 'document', id: 'doc-1', mediaType: 'application/pdf', title: 'spec.pdf', filename: 'spec.pdf' }, citedText: 'back off exponentially' },
            ],
          },
          P.stop(sdk),
        ),
      ]),
    }),

  // OpenAI's reasoning as the Responses API streams it: an item id on the start, the
  // encrypted content (kept for the next request) on the end.
  'openai-reasoning-encrypted': (sdk) =>
    oneRequest('Is 91 prime?', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'reasoning-start', id: 'rs_1:0', providerMetadata: { openai: { itemId: 'rs_1', reasoningEncryptedContent: null } } },
          { type: 'reasoning-delta', id: 'rs_1:0', delta: '91 = 7 * 13.' },
          { type: 'reasoning-end', id: 'rs_1:0', providerMetadata: { openai: { itemId: 'rs_1', reasoningEncryptedContent: 'gAAAAABo-encrypted-reasoning' } } },
          P.text('txt-0', ['No: 91 = 7 × 13.']),
          P.stop(sdk),
        ),
      ]),
    }),

  // Two calls in one step whose inputs stream interleaved, both run, then the answer.
  'parallel-tool-calls': (sdk) =>
    oneRequest('Weather and time in Paris, at once.', {
      tools: { weather: weatherTool(sdk), time: timeTool(sdk) },
      stopWhen: sdk.ai.stepCountIs(2),
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'tool-input-start', id: 'call-a', toolName: 'weather' },
          { type: 'tool-input-start', id: 'call-b', toolName: 'time' },
          { type: 'tool-input-delta', id: 'call-a', delta: '{"city":' },
          { type: 'tool-input-delta', id: 'call-b', delta: '{"city":' },
          { type: 'tool-input-delta', id: 'call-b', delta: '"Paris"}' },
          { type: 'tool-input-delta', id: 'call-a', delta: '"Paris"}' },
          { type: 'tool-input-end', id: 'call-b' },
          { type: 'tool-input-end', id: 'call-a' },
          { type: 'tool-call', toolCallId: 'call-a', toolName: 'weather', input: '{"city":"Paris"}' },
          { type: 'tool-call', toolCallId: 'call-b', toolName: 'time', input: '{"city":"Paris"}' },
          P.toolUse(sdk),
        ),
        step('resp-2', P.text('txt-0', ['Paris: 18°C at 14:05.']), P.stop(sdk)),
      ]),
    }),

  // Providers and gateways number calls per step: `call_0` in step 1 and again in step 2.
  'call-id-reused': (sdk) =>
    oneRequest('What is the weather in Paris, then in Tokyo?', {
      tools: { weather: weatherTool(sdk) },
      stopWhen: sdk.ai.stepCountIs(3),
      model: mockModel(sdk, [
        step('resp-1', P.toolCall('call_0', 'weather', { city: 'Paris' }), P.toolUse(sdk)),
        step('resp-2', P.toolCall('call_0', 'weather', { city: 'Tokyo' }), P.toolUse(sdk)),
        step('resp-3', P.text('txt-0', ['Paris: 18°C. ', 'Tokyo: 24°C.']), P.stop(sdk)),
      ]),
    }),

  // A provider that chunks mid-character splits a UTF-16 surrogate pair between two
  // deltas (JSON.stringify writes each half as a `\\uXXXX` escape): in reasoning, in text,
  // in a tool's streamed input (the 4-emoji input's half falls inside the first emoji);
  // and a lone half that is never completed.
  'split-surrogate': (sdk) =>
    oneRequest('Answer with emoji.', {
      tools: { note: sdk.ai.tool({ description: 'Keep a note', inputSchema: z.object({ note: z.string() }), execute: async ({ note }) => ({ kept: note.length }) }) },
      stopWhen: sdk.ai.stepCountIs(2),
      model: mockModel(sdk, [
        step(
          'resp-1',
          P.reasoning('rsn-0', ['Thinking \ud83e', '\udd14 done.']),
          P.text('txt-0', ['Smile \ud83d', '\ude00 and a lone \ud83d', ' half.']),
          P.toolCall('call-1', 'note', { note: '\u{1F600}\u{1F600}\u{1F600}\u{1F600}' }),
          P.toolUse(sdk),
        ),
        step('resp-2', P.text('txt-0', ['Noted \ud83d', '\udc4d']), P.stop(sdk)),
      ]),
    }),

  'tool-error': (sdk) =>
    toolThenAnswer(sdk, 'Read the file missing.txt.', {
      name: 'read',
      tool: {
        description: 'Read a file',
        inputSchema: z.object({ path: z.string() }),
        execute: async ({ path }) => {
          throw new Error(`ENOENT: no such file or directory, open '${path}'`);
        },
      },
      input: { path: 'missing.txt' },
      answer: 'The file does not exist.',
    }),

  'generator-tool': (sdk) =>
    toolThenAnswer(sdk, 'Search the docs for "compaction".', {
      name: 'search',
      tool: {
        description: 'Search the docs, reporting progress',
        inputSchema: z.object({ query: z.string() }),
        execute: async function* ({ query }) {
          yield { status: 'searching', query };
          yield { status: 'reading', hits: 2 };
          yield { status: 'done', results: ['docs/replay-format.md', 'docs/compaction.md'] };
        },
      },
      input: { query: 'compaction' },
      answer: 'Two documents mention compaction.',
    }),

  // A user message added while the run works (ai 7's experimental steering): sent while
  // the tool runs, delivered to the next step, streamed as a `steering-message` part.
  steering: (sdk) => {
    if (!sdk.ai.experimental_createSteering) {
      return { unsupported: `ai@${sdk.version} has no steering (experimental_createSteering)` };
    }
    const steering = sdk.ai.experimental_createSteering();
    return oneRequest('What is the weather in Paris?', {
      experimental_steering: steering,
      tools: {
        weather: sdk.ai.tool({
          description: 'Current weather for a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => {
            // delivered at the next step boundary: not awaited here
            void steering.steer('Give it in Fahrenheit too.', { id: 'steer-1' });
            return { city, temperature: 18, unit: 'C' };
          },
        }),
      },
      stopWhen: sdk.ai.stepCountIs(3),
      model: mockModel(sdk, [
        step('resp-1', P.toolCall('call-1', 'weather', { city: 'Paris' }), P.toolUse(sdk)),
        step('resp-2', P.text('txt-0', ['Paris: 18°C (64°F).']), P.stop(sdk)),
      ]),
    });
  },

  'tool-approval-granted': (sdk) => approvalScenario(sdk, true),
  'tool-approval-denied': (sdk) => approvalScenario(sdk, false),

  'provider-executed-tool': (sdk) =>
    oneRequest('Search the web for the AI SDK.', {
      tools: { web_search: sdk.providerTool(sdk.ai, 'web_search') },
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'tool-call', toolCallId: 'srv-1', toolName: 'web_search', input: JSON.stringify({ query: 'AI SDK' }), providerExecuted: true },
          {
            type: 'tool-result',
            toolCallId: 'srv-1',
            toolName: 'web_search',
            result: [{ url: 'https://ai-sdk.dev', title: 'AI SDK' }],
            providerExecuted: true,
            providerMetadata: { mock: { searchId: 'ws_001' } },
          },
          P.text('txt-0', ['The AI SDK is a TypeScript toolkit.']),
          P.stop(sdk),
        ),
      ]),
    }),

  'file-output': (sdk) =>
    oneRequest('Draw a one-pixel image.', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          sdk.supports.reasoningFile ? [{ type: 'reasoning-file', mediaType: 'image/png', ...sdk.fileData(PNG_1x1) }] : [],
          { type: 'file', mediaType: 'image/png', ...sdk.fileData(PNG_1x1) },
          P.text('txt-0', ['Here is the image.']),
          P.stop(sdk),
        ),
      ]),
    }),

  sources: (sdk) =>
    oneRequest('Where is the replay format documented?', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          { type: 'source', sourceType: 'url', id: 'src-1', url: 'https://example.com/replay-format', title: 'Replay format' },
          { type: 'source', sourceType: 'document', id: 'src-2', mediaType: 'text/markdown', title: 'replay-format.md', filename: 'docs/replay-format.md' },
          P.text('txt-0', ['In docs/replay-format.md.']),
          P.stop(sdk),
        ),
      ]),
    }),

  'error-part': (sdk) =>
    oneRequest('Tell me a long story.', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          P.unfinishedText('txt-0', 'Once upon a time'),
          { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
          P.finish(sdk, 'error', 'error', usage1),
        ),
      ]),
    }),

  'provider-error': (sdk) =>
    oneRequest('Hello?', {
      model: failingModel(sdk, {
        message: 'Bad Request: prompt is too long',
        statusCode: 400,
        responseHeaders: { 'content-type': 'application/json' },
        responseBody: '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}',
        isRetryable: false,
        data: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long' } },
      }),
    }),

  'provider-error-retried': (sdk) =>
    oneRequest('Hello?', {
      maxRetries: 1,
      model: failingModel(sdk, {
        message: 'Service Unavailable',
        statusCode: 503,
        responseHeaders: { 'retry-after-ms': '10' },
        responseBody: '{"error":"service unavailable"}',
      }),
    }),

  'stream-throws': (sdk) =>
    oneRequest('Tell me a story.', {
      model: mockModel(sdk, [
        step(
          'resp-1',
          P.unfinishedText('txt-0', 'Once upon'),
          {
            throw: apiCallError(sdk, {
              message: 'Connection reset mid-stream',
              requestBodyValues: {},
              statusCode: 200,
              isRetryable: true,
            }),
          },
        ),
      ]),
    }),

  'abort-mid-text': (sdk) => {
    const controller = new AbortController();
    let deltas = 0;
    return oneRequest(
      'Count slowly to ten.',
      {
        abortSignal: controller.signal,
        model: mockModel(
          sdk,
          [
            step(
              'resp-1',
              P.text('txt-0', ['one ', 'two ', 'three ', 'four ', 'five ', 'six ', 'seven ', 'eight ', 'nine ', 'ten']),
              P.stop(sdk),
            ),
          ],
          { delayMs: 5 },
        ),
      },
      (part) => {
        if (part.type === 'text-delta' && ++deltas === 3) controller.abort();
      },
    );
  },

  'abort-mid-tool': (sdk) => {
    const controller = new AbortController();
    return toolThenAnswer(sdk, 'Run the slow build.', {
      name: 'build',
      tool: {
        description: 'Run a long build',
        inputSchema: z.object({ target: z.string() }),
        execute: ({ target }, { abortSignal }) =>
          new Promise((resolve, reject) => {
            const t = setTimeout(() => resolve({ target, ok: true }), 10_000);
            abortSignal?.addEventListener('abort', () => {
              clearTimeout(t);
              reject(abortSignal.reason);
            });
          }),
      },
      input: { target: 'release' },
      answer: 'Built.',
      options: { abortSignal: controller.signal },
      onPart: (part) => {
        if (part.type === 'tool-call') setTimeout(() => controller.abort(), 20);
      },
    });
  },

  'raw-chunks': (sdk) =>
    oneRequest('Say hi.', {
      includeRawChunks: true,
      model: mockModel(sdk, [
        [
          ...P.start(),
          { type: 'raw', rawValue: { type: 'message_start', message: { id: 'msg_1', model: 'mock-model' } } },
          ...P.meta('resp-1'),
          { type: 'raw', rawValue: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } },
          { type: 'text-start', id: 'txt-0' },
          { type: 'raw', rawValue: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi!' } } },
          { type: 'text-delta', id: 'txt-0', delta: 'Hi!' },
          { type: 'raw', rawValue: { type: 'content_block_stop', index: 0 } },
          { type: 'text-end', id: 'txt-0' },
          { type: 'raw', rawValue: { type: 'message_stop' } },
          ...P.stop(sdk),
        ],
      ]),
    }),
};

function approvalScenario(sdk, approved) {
  if (!sdk.supports.approval) {
    return { unsupported: `ai@${sdk.version} has no tool approval (no needsApproval / tool-approval-* parts)` };
  }
  const prompt = 'Delete the build directory.';
  const tools = {
    shell: sdk.ai.tool({
      description: 'Run a shell command',
      inputSchema: z.object({ command: z.string() }),
      needsApproval: true,
      execute: async ({ command }) => ({ command, exitCode: 0, stdout: '' }),
    }),
  };
  // The same mock model serves both requests: first the tool call, then the answer.
  const answer = approved ? 'Deleted the build directory.' : 'Understood, I left the build directory alone.';
  const model = mockModel(sdk, toolThenText(sdk, 'shell', { command: 'rm -rf build' }, answer));
  return {
    prompt,
    requests: [
      {
        label: 'request 1: the tool call needs approval',
        options: { model, tools, stopWhen: sdk.ai.stepCountIs(3), prompt },
      },
      {
        label: `request 2: tool-approval-response approved=${approved} passed in the messages`,
        options: async ({ parts, responseMessages }) => {
          const request = parts.find((p) => p.type === 'tool-approval-request');
          return {
            model,
            tools,
            stopWhen: sdk.ai.stepCountIs(3),
            messages: [
              { role: 'user', content: prompt },
              ...responseMessages,
              {
                role: 'tool',
                content: [
                  {
                    type: 'tool-approval-response',
                    approvalId: request.approvalId,
                    approved,
                    ...(approved ? {} : { reason: 'not now' }),
                  },
                ],
              },
            ],
          };
        },
      },
    ],
  };
}

// ---------------------------------------------------------------------------------------
// Driver

/** `continueMessage`: the UI message a continued request's stream adds to (as `useChat`
 * continues the last assistant message after the user answered an approval). */
async function runRequest(sdk, options, onPart, continueMessage = undefined) {
  const errors = [];
  const result = sdk.ai.streamText({
    ...options,
    // the SDK's default onError logs to the console; the error parts are recorded anyway
    onError: ({ error }) => errors.push(error),
  });
  // What `useChat` renders: the UI message stream of the same result, read as the SDK's
  // own `readUIMessageStream` reads it, consumed beside `fullStream`.
  const uiDone = (async () => {
    let last;
    try {
      const stream = result.toUIMessageStream({
        sendSources: true,
        onError: (e) => (e instanceof Error ? e.message : String(e)),
      });
      const read = sdk.ai.readUIMessageStream({ stream, message: continueMessage, onError: () => {} });
      for await (const message of read) last = message;
    } catch {}
    return last;
  })();
  const parts = [];
  let thrown;
  try {
    for await (const part of result.fullStream) {
      parts.push(part);
      onPart?.(part);
    }
  } catch (error) {
    // not a part: iterating fullStream rejected. Recorded as a comment line.
    thrown = error;
  }
  let responseMessages = [];
  // after fullStream rejected, result.response never settles: only read it after a clean end.
  // ai 7 keeps every step's messages in `responseMessages` (its `response` is the last
  // step's); ai 5's `response.messages` holds every step's.
  if (thrown === undefined) {
    try {
      if (result.responseMessages !== undefined) {
        // Each step's steering messages (user messages added to its input), then its
        // response messages: `responseMessages` leaves the steering messages out, though
        // the model received them. What came before the first step (the results of tools
        // the user approved) stays first.
        const all = await result.responseMessages;
        const steps = await result.steps;
        const fromSteps = steps.flatMap((s) => s.response.messages);
        const before = all.slice(0, all.length - fromSteps.length);
        if (JSON.stringify(all.slice(before.length)) !== JSON.stringify(fromSteps)) {
          throw new Error(`the steps' messages differ from responseMessages: ${JSON.stringify(fromSteps)} vs ${JSON.stringify(all)}`);
        }
        responseMessages = [
          ...before,
          ...steps.flatMap((s) => [...(s.experimental_steeringMessages ?? []), ...s.response.messages]),
        ];
      } else {
        responseMessages = (await result.response).messages;
      }
    } catch (e) {
      if (String(e?.message).includes('differ from responseMessages')) throw e;
    }
  }
  const uiMessage = thrown === undefined ? await uiDone : undefined;
  return { parts, responseMessages, uiMessage, thrown };
}

/** The follow-up question of every `.next.json`. */
const FOLLOW_UP = 'And then?';

async function record(sdk, name, build) {
  const spec = build(sdk);
  const dir = join(outRoot, sdk.tag);
  const file = join(dir, `${name}.jsonl`);
  if (spec.unsupported) {
    if (existsSync(file)) rmSync(file);
    if (existsSync(join(dir, `${name}.next.json`))) rmSync(join(dir, `${name}.next.json`));
    return { name, tag: sdk.tag, unsupported: spec.unsupported };
  }
  const lines = [
    `# recorded with ai@${sdk.version} by scripts/aisdk/record.mjs: ${name}`,
    `# model: ${sdk.mockName} from ai/test; parts of result.fullStream as JSON, unchanged except:` +
      ` Uint8Array as base64 string, generated files as {type?, mediaType, base64, providerMetadata?},` +
      ` Error as {name, message, ...own enumerable fields}, Date as ISO string`,
    toJsonLine({ type: 'session', title: `aisdk ${sdk.tag} ${name}` }),
    toJsonLine({ type: 'user', text: spec.prompt }),
  ];
  let prev = { parts: [], responseMessages: [] };
  // The conversation as the app holds it: the prompt, each request's response messages and
  // what the app adds between requests; `complete` stays true while every request ended
  // cleanly (a request whose stream threw has no response messages to continue from).
  let conversation = [{ role: 'user', content: spec.prompt }];
  const uiMessages = [{ role: 'user', parts: [{ type: 'text', text: spec.prompt }] }];
  let complete = true;
  for (const [i, req] of spec.requests.entries()) {
    if (spec.requests.length > 1) {
      lines.push(`# ${req.label ?? `request ${i + 1}`}`);
      if (i > 0) lines.push(toJsonLine({ type: 'assistant' }));
    }
    let options = typeof req.options === 'function' ? await req.options(prev) : req.options;
    if (!options.prompt && !options.messages) options = { ...options, prompt: spec.prompt };
    let continueMessage;
    if (options.messages) {
      // What the app adds to the conversation before this request (the user's approval
      // responses) is part of the session: written as replay lines, as the app sends it;
      // in the UI, the answered tool waits in the last assistant message, which the
      // request's stream continues.
      const last = uiMessages.at(-1);
      continueMessage = last?.role === 'assistant' ? structuredClone(last) : undefined;
      for (const message of options.messages.slice(conversation.length)) {
        for (const part of Array.isArray(message.content) ? message.content : []) {
          if (part.type !== 'tool-approval-response') continue;
          // with the call it answers (the replay finds a call of an earlier message by
          // its id), from the request the app answered
          const request = prev.parts.find((p) => p.type === 'tool-approval-request' && p.approvalId === part.approvalId);
          const toolCall = request ? { toolCall: { toolCallId: request.toolCall.toolCallId } } : {};
          lines.push(toJsonLine({ ...part, ...toolCall }));
          const tool = continueMessage?.parts.find((p) => p.approval?.id === part.approvalId);
          if (tool) {
            tool.state = 'approval-responded';
            tool.approval = { id: part.approvalId, approved: part.approved, ...(part.reason ? { reason: part.reason } : {}) };
          }
        }
      }
      conversation = [...options.messages];
    }
    prev = await runRequest(sdk, options, req.onPart, continueMessage);
    conversation.push(...prev.responseMessages);
    if (prev.uiMessage && continueMessage) uiMessages[uiMessages.length - 1] = prev.uiMessage;
    else if (prev.uiMessage) uiMessages.push(prev.uiMessage);
    for (const part of prev.parts) lines.push(toJsonLine(part));
    if (prev.thrown !== undefined) {
      complete = false;
      lines.push(`# iterating result.fullStream threw (no further parts): ${toJsonLine(prev.thrown)}`);
    }
  }
  // Beside the stream: what the SDK itself holds for the next turn, to check a history
  // rebuilt from the store against (see the README's "Next request").
  const next = {
    recordedWith: `ai@${sdk.version}`,
    complete,
    messages: conversation,
    uiMessages,
    followUp: FOLLOW_UP,
    nextPrompt: complete ? await promptOf(sdk.tag, [...conversation, { role: 'user', content: FOLLOW_UP }]) : null,
  };
  mkdirSync(dir, { recursive: true });
  writeFileSync(file, lines.join('\n') + '\n');
  writeFileSync(join(dir, `${name}.next.json`), JSON.stringify(JSON.parse(toJsonLine(next)), null, 1) + '\n');
  const types = new Set(
    lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l).type),
  );
  return { name, tag: sdk.tag, file: relative(process.cwd(), file), types: [...types] };
}

// A request whose model call fails rejects the result's promises nobody awaits (the UI
// message stream's own bookkeeping among them); the failure itself is recorded as parts.
process.on('unhandledRejection', () => {});

const wanted = process.argv.slice(2);
const sdks = await loadSdks();
for (const [name, build] of Object.entries(scenarios)) {
  if (wanted.length && !wanted.includes(name)) continue;
  for (const sdk of sdks) {
    const r = await record(sdk, name, build);
    if (r.unsupported) console.log(`${sdk.tag} ${name}: skipped (${r.unsupported})`);
    else console.log(`${sdk.tag} ${name}: ${r.file} [${r.types.join(', ')}]`);
  }
}
