// The client against a running `forge-store serve`, driven by the real AI SDK (ai 7) with
// its mock model. Run by `server/tests/ts_client.rs`, which starts the servers and passes:
//   FORGE_URL  a running serve;  TOKEN  a token of its tenant;  TOKEN_B  one of another tenant
//   AWAY_URL   a serve that starts 1.5 s after this test writes OUT/away-waiting (then OUT/away-up)
//   DEAD_URL   nothing listens there
//   OUT        a directory: each recorded session's stream is written to OUT/<session>.jsonl
//              (what `forge-store replay` is given, to compare with what serve stored)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ai from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { z } from 'zod';
import { ForgeClient, ForgeStoreError, toReplayLine } from '../dist/index.js';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run by server/tests/ts_client.rs)`);
  return v;
};
const FORGE_URL = env('FORGE_URL');
const TOKEN = env('TOKEN');
const OUT = env('OUT');

const DATE = new Date('2025-01-01T00:00:00.000Z');
const usage = {
  inputTokens: { total: 12, noCache: 12, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 8, text: 8, reasoning: 0 },
};
const chunks = (items) =>
  new ReadableStream({
    start(c) {
      for (const x of items) c.enqueue(x);
      c.close();
    },
  });
const start = (id) => [
  { type: 'stream-start', warnings: [] },
  { type: 'response-metadata', id, modelId: 'mock-model', timestamp: DATE },
];
const finish = (unified) => ({ type: 'finish', finishReason: { unified, raw: unified }, usage });

/** A mock model: a step of reasoning (with a signature), text and two tool calls, then a
 * step with a long answer in many deltas. Records the prompts it receives. */
function model(prompts = []) {
  const answer = Array.from({ length: 200 }, (_, i) => `word${i} `);
  const steps = [
    [
      ...start('resp-1'),
      { type: 'reasoning-start', id: 'r0' },
      { type: 'reasoning-delta', id: 'r0', delta: 'Two cities. ' },
      { type: 'reasoning-delta', id: 'r0', delta: '', providerMetadata: { anthropic: { signature: 'sig-1' } } },
      { type: 'reasoning-end', id: 'r0' },
      { type: 'text-start', id: 't0' },
      { type: 'text-delta', id: 't0', delta: 'Looking ' },
      { type: 'text-delta', id: 't0', delta: 'it up.' },
      { type: 'text-end', id: 't0' },
      { type: 'tool-call', toolCallId: 'call-1', toolName: 'weather', input: '{"city":"Paris"}' },
      { type: 'tool-call', toolCallId: 'call-2', toolName: 'weather', input: '{"city":"Tokyo"}' },
      finish('tool-calls'),
    ],
    [
      ...start('resp-2'),
      { type: 'text-start', id: 't0' },
      ...answer.map((delta) => ({ type: 'text-delta', id: 't0', delta })),
      { type: 'text-end', id: 't0' },
      finish('stop'),
    ],
  ];
  let call = 0;
  return new MockLanguageModelV4({
    doStream: async (options) => {
      prompts.push(options.prompt);
      return { stream: chunks(steps[Math.min(call++, steps.length - 1)]) };
    },
  });
}

const tools = {
  weather: ai.tool({
    description: 'Current weather for a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, temperature: city === 'Paris' ? 18 : 24, unit: 'C' }),
  }),
};

const PROMPT = 'Weather in Paris and Tokyo?';
const run = (prompts) => ai.streamText({ model: model(prompts), prompt: PROMPT, tools, stopWhen: ai.stepCountIs(3) });

/** Reads the app's side of a recording, writing what was uploaded to OUT/<session>.jsonl. */
async function consume(session, stream, onPart = () => {}) {
  const parts = [];
  for await (const part of stream) {
    onPart(part);
    parts.push(part);
  }
  const lines = [toReplayLine({ type: 'user', text: PROMPT }), ...parts.map(toReplayLine)];
  writeFileSync(join(OUT, `${session}.jsonl`), lines.join(''));
  return parts;
}

/** The prompt a mock model receives for `messages`, as JSON. */
async function promptOf(messages) {
  const prompts = [];
  const result = ai.streamText({ model: model(prompts), messages });
  for await (const _ of result.fullStream) {
  }
  return JSON.parse(JSON.stringify(prompts[0]));
}

test('record tees a run into serve, and nextRequest gives back the SDK\'s own messages', async () => {
  const client = new ForgeClient({ baseUrl: FORGE_URL, token: TOKEN });
  const result = run();
  const rec = client.record('ses_ts_tools', result.fullStream, { prompt: PROMPT, title: 'ts client' });
  const parts = await consume('ses_ts_tools', rec.stream);
  const report = await rec.done;
  assert.equal(report.assistant_messages, 1, JSON.stringify(report));
  assert.ok(parts.some((p) => p.type === 'tool-result'), 'the app saw the whole run');
  // As JSON (what an app sends or stores): the SDK's own objects carry fields set to
  // `undefined` (`providerOptions: undefined`), which JSON leaves out.
  const own = JSON.parse(JSON.stringify(await result.responseMessages));

  const next = await client.nextRequest('ses_ts_tools');
  assert.deepEqual(next[0], { role: 'user', content: [{ type: 'text', text: PROMPT }] });
  assert.deepEqual(next.slice(1), own, 'the rebuilt messages after the prompt are the SDK\'s');
  // The follow-up the model receives is the same either way.
  const followUp = { role: 'user', content: 'And then?' };
  assert.deepEqual(
    await promptOf([...next, followUp]),
    await promptOf([{ role: 'user', content: PROMPT }, ...own, followUp]),
  );
  const ui = await client.uiMessages('ses_ts_tools');
  assert.equal(ui.length, 2);
  assert.equal(ui[1].parts.filter((p) => p.type === 'tool-weather').length, 2);
});

test('search finds what the recorded run said, in its tenant only', async () => {
  const client = new ForgeClient({ baseUrl: FORGE_URL, token: TOKEN });
  // The second tool call's input; the long answer's words.
  const tokyo = await client.search('TOKYO', { sessionID: 'ses_ts_tools' });
  assert.ok(tokyo.length >= 1, JSON.stringify(tokyo));
  for (const hit of tokyo) {
    assert.equal(hit.sessionID, 'ses_ts_tools');
    assert.ok(['tool', 'text', 'reasoning'].includes(hit.type), hit.type);
    assert.ok(hit.highlights.some(([a, b]) => hit.snippet.slice(a, b).toLowerCase() === 'tokyo'), JSON.stringify(hit));
  }
  assert.ok(tokyo.some((h) => h.type === 'tool'), 'the tool call that asked for Tokyo is found');
  const both = await client.search('word150 word7', { limit: 5 });
  assert.equal(both.length, 1, JSON.stringify(both));
  assert.equal(both[0].type, 'text');
  assert.match(both[0].snippet, /\bword7\b/);
  assert.deepEqual(await client.search('nowhere-said-xyzzy'), []);
  // Another tenant's token finds nothing of it.
  assert.deepEqual(await new ForgeClient({ baseUrl: FORGE_URL, token: env('TOKEN_B') }).search('Tokyo'), []);
  await assert.rejects(client.search(' -- '), (e) => {
    assert.ok(e instanceof ForgeStoreError);
    assert.equal(e.status, 400);
    assert.match(e.message, /holds no word/);
    return true;
  });
});

test('a server that is briefly away: lines wait in a bounded buffer, the app waits with them, nothing is lost', async () => {
  const maxBufferedBytes = 2048;
  const client = new ForgeClient({ baseUrl: env('AWAY_URL'), token: TOKEN, maxBufferedBytes, retries: 20, retryDelayMs: 100 });
  const rec = client.record('ses_ts_away', run().fullStream, { prompt: PROMPT });
  // The harness starts the late server once this file exists, and writes OUT/away-up.
  writeFileSync(join(OUT, 'away-waiting'), '');
  let awayBytes = 0;
  let largest = 0;
  const parts = await consume('ses_ts_away', rec.stream, (part) => {
    const n = toReplayLine(part).length;
    largest = Math.max(largest, n);
    if (!existsSync(join(OUT, 'away-up'))) awayBytes += n;
  });
  const report = await rec.done;
  assert.equal(report.assistant_messages, 1, JSON.stringify(report));
  assert.ok(parts.length > 200, `${parts.length} parts`);
  // While the server was away, the app read no more than the buffer holds (and the
  // prompt line, and the one part that filled it).
  assert.ok(awayBytes <= maxBufferedBytes + 2 * largest + 200, `${awayBytes} bytes read while away`);
  assert.ok(awayBytes > 0, 'the run started while the server was away');
});

test('a server that stays away: a clear error, and the app still gets every part', async () => {
  const client = new ForgeClient({ baseUrl: env('DEAD_URL'), token: TOKEN, retries: 2, retryDelayMs: 20 });
  const alone = [];
  for await (const part of run().fullStream) alone.push(part.type);
  const rec = client.record('ses_ts_dead', run().fullStream, { prompt: PROMPT });
  const seen = [];
  for await (const part of rec.stream) seen.push(part.type);
  assert.deepEqual(seen, alone);
  await assert.rejects(rec.done, (e) => {
    assert.ok(e instanceof ForgeStoreError);
    assert.match(e.message, /is not reachable after 3 attempts/);
    assert.match(e.message, /ses_ts_dead was not recorded/);
    return true;
  });
});

test('an upload the server refuses names the reason', async () => {
  const client = new ForgeClient({ baseUrl: FORGE_URL, token: 'not-a-token' });
  const rec = client.record('ses_ts_refused', run().fullStream, { prompt: PROMPT });
  for await (const _ of rec.stream) {
  }
  await assert.rejects(rec.done, (e) => {
    assert.ok(e instanceof ForgeStoreError);
    assert.equal(e.status, 401);
    assert.match(e.message, /upload of session ses_ts_refused was refused \(401\)/);
    return true;
  });
});
