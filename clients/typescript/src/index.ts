// A client for the apps that produce AI SDK streams: `record` tees a stream into
// forge-store's streaming upload (`POST /session/{id}/stream`) while the app keeps
// consuming it, and `nextRequest` reads the next request back from the store
// (`GET /session/{id}/view?format=model-messages`).

import { toReplayLine } from './line.js';

export { toReplayLine } from './line.js';

/** How to reach a `forge-store serve`. */
export interface ForgeClientOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:4096`. */
  baseUrl: string;
  /** A bearer token of the tenant (`forge-store token`); none for an open server. */
  token?: string;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /**
   * The most bytes of replay lines held for the server (default 8 MiB). When the server
   * is slower than the model, or away, and this much waits, the app's stream waits too
   * (backpressure) until the server takes it or recording gives up.
   */
  maxBufferedBytes?: number;
  /** How often to try again to reach a server that is away (default 5). */
  retries?: number;
  /** The first wait before trying again, doubled each time up to 5 s (default 200 ms). */
  retryDelayMs?: number;
}

/** The user's answer to a tool approval request, sent before the continued request. */
export interface ApprovalAnswer {
  approvalId: string;
  approved: boolean;
  reason?: string;
  /** The call it answers (lets the server find a call of an earlier message). */
  toolCallId?: string;
}

/** What one `record` call writes besides the stream itself. */
export interface RecordOptions {
  /** The user message this request answers; unset: the stream continues the last one. */
  prompt?: string;
  /** The title of a session this upload creates. */
  title?: string;
  /** The user's approval answers, written before the stream (a continued request). */
  approvals?: ApprovalAnswer[];
  /** Unknown event types are errors rather than skipped (`?strict`). */
  strict?: boolean;
}

/** The server's replay report of an upload (`forge-store replay --json`'s shape). */
export type ReplayReport = Record<string, unknown>;

/** A recording in progress. */
export interface Recording<T> {
  /** The stream for the app: every part of the source, in order, unchanged. */
  stream: ReadableStream<T>;
  /**
   * The server's report once the upload ended; rejects with a {@link ForgeStoreError}
   * when the turn could not be recorded (the app's stream goes on regardless).
   */
  done: Promise<ReplayReport>;
}

/** A request forge-store refused, or a server that could not be reached. */
export class ForgeStoreError extends Error {
  /** The HTTP status, when the server answered. */
  readonly status?: number;
  /** The error body the server answered (`{name, message}`), when it did. */
  readonly body?: unknown;

  constructor(message: string, options: { status?: number; body?: unknown; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = 'ForgeStoreError';
    this.status = options.status;
    this.body = options.body;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class ForgeClient {
  private readonly base: string;
  private readonly token?: string;
  private readonly fetch: typeof fetch;
  private readonly maxBufferedBytes: number;
  private readonly retries: number;
  private readonly retryDelayMs: number;

  constructor(options: ForgeClientOptions) {
    this.base = options.baseUrl.replace(/\/+$/, '');
    this.token = options.token;
    this.fetch = options.fetch ?? globalThis.fetch;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 8 * 1024 * 1024;
    this.retries = options.retries ?? 5;
    this.retryDelayMs = options.retryDelayMs ?? 200;
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.token ? { authorization: `Bearer ${this.token}`, ...extra } : extra;
  }

  /**
   * Tees `source` (an AI SDK `result.fullStream`, or any stream of its parts) into the
   * session's streaming upload while the app reads `stream`. Each part is written as a
   * replay line as it passes; subscribers of the session see the deltas live.
   *
   * Before the upload starts, the client asks the server for the session: a server that
   * is away (no answer, or 503) is tried again (`retries`, with a doubling wait) while up
   * to `maxBufferedBytes` of lines wait, and the app's stream waits when that is full; a
   * server that refuses (a bad token: 401) is an error at once. A server still away after the last try, or an upload that fails
   * once started (the server then closes the open answer as a stream that ended early,
   * keeping what it stored), ends the recording: `done` rejects with an error saying
   * so, and the app's stream goes on.
   */
  record<T>(sessionID: string, source: ReadableStream<T> | AsyncIterable<T>, options: RecordOptions = {}): Recording<T> {
    const queue: string[] = [];
    let queued = 0;
    let ended = false;
    let failed = false;
    let wakeUploader: (() => void) | undefined;
    let wakeProducer: (() => void) | undefined;
    const wake = () => {
      wakeUploader?.();
      wakeUploader = undefined;
    };
    const drained = () => {
      wakeProducer?.();
      wakeProducer = undefined;
    };
    const push = (line: string) => {
      if (failed) return;
      queue.push(line);
      queued += line.length;
      wake();
    };

    if (options.prompt !== undefined) push(toReplayLine({ type: 'user', text: options.prompt }));
    for (const a of options.approvals ?? []) {
      push(
        toReplayLine({
          type: 'tool-approval-response',
          approvalId: a.approvalId,
          approved: a.approved,
          ...(a.reason !== undefined ? { reason: a.reason } : {}),
          ...(a.toolCallId !== undefined ? { toolCall: { toolCallId: a.toolCallId } } : {}),
        }),
      );
    }

    const reader = readerOf(source);
    const stream = new ReadableStream<T>(
      {
        pull: async (controller) => {
          // Backpressure: the model's stream is read no faster than the server takes it.
          while (!failed && queued > this.maxBufferedBytes) {
            await new Promise<void>((resolve) => (wakeProducer = resolve));
          }
          let next: ReadableStreamReadResult<T>;
          try {
            next = await reader.read();
          } catch (error) {
            ended = true;
            wake();
            controller.error(error);
            return;
          }
          if (next.done) {
            ended = true;
            wake();
            controller.close();
            return;
          }
          push(toReplayLine(next.value));
          controller.enqueue(next.value);
        },
        cancel: async (reason) => {
          ended = true;
          wake();
          await reader.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );

    const body = new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        while (queue.length === 0 && !ended) {
          await new Promise<void>((resolve) => (wakeUploader = resolve));
        }
        if (queue.length === 0) {
          controller.close();
          return;
        }
        const batch = queue.splice(0, queue.length).join('');
        queued = 0;
        drained();
        controller.enqueue(encoder.encode(batch));
      },
    });

    const done = this.upload(sessionID, body, options).catch((error: unknown) => {
      // Recording ends; the app's stream goes on without it.
      failed = true;
      queue.length = 0;
      queued = 0;
      drained();
      throw error;
    });
    // A rejection the app does not wait for is still reported through `done`.
    done.catch(() => {});
    return { stream, done };
  }

  /** Waits for the server (retrying), then uploads `body`. */
  private async upload(sessionID: string, body: ReadableStream<Uint8Array>, options: RecordOptions): Promise<ReplayReport> {
    let wait = this.retryDelayMs;
    for (let attempt = 0; ; attempt++) {
      const away = await this.unreachable(sessionID);
      if (away === undefined) break;
      if (attempt >= this.retries) {
        throw new ForgeStoreError(
          `forge-store at ${this.base} is not reachable after ${attempt + 1} attempts (${away}); session ${sessionID} was not recorded`,
          { cause: away },
        );
      }
      await sleep(wait);
      wait = Math.min(wait * 2, 5000);
    }
    const query = new URLSearchParams();
    if (options.title !== undefined) query.set('title', options.title);
    if (options.strict) query.set('strict', 'true');
    const url = `${this.base}/session/${encodeURIComponent(sessionID)}/stream${query.size ? `?${query}` : ''}`;
    let response: Response;
    try {
      response = await this.fetch(url, {
        method: 'POST',
        headers: this.headers({ 'content-type': 'application/x-ndjson' }),
        body,
        // a streaming request body (Node's fetch requires it)
        duplex: 'half',
      } as RequestInit);
    } catch (error) {
      throw new ForgeStoreError(
        `the upload of session ${sessionID} to ${this.base} failed (${describe(error)}); the server closes the answer as a stream that ended early, keeping what it stored`,
        { cause: error },
      );
    }
    return this.answer(response, `the upload of session ${sessionID}`);
  }

  /**
   * `undefined` when the server takes the session (it answers for it: 200, or 404 for a
   * session the upload creates); why not when it is away (no answer, or 503: its backend
   * is down or busy). Any other answer (a token it refuses: 401) is an error at once.
   */
  private async unreachable(sessionID: string): Promise<string | undefined> {
    let r: Response;
    try {
      r = await this.fetch(`${this.base}/session/${encodeURIComponent(sessionID)}`, { headers: this.headers() });
    } catch (error) {
      return describe(error);
    }
    if (r.status === 503) {
      await r.body?.cancel();
      return 'it answered 503';
    }
    if (r.ok || r.status === 404) {
      await r.body?.cancel();
      return undefined;
    }
    return this.answer(r, `the upload of session ${sessionID}`);
  }

  private async answer(response: Response, what: string): Promise<any> {
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
    if (!response.ok) {
      const b = parsed as { name?: string; message?: string };
      const detail = b && typeof b === 'object' && b.message ? `${b.name ?? 'Error'}: ${b.message}` : text;
      throw new ForgeStoreError(`${what} was refused (${response.status}): ${detail}`, {
        status: response.status,
        body: parsed,
      });
    }
    return parsed;
  }

  private async view(sessionID: string, format: string, sdk: 5 | 6 | 7): Promise<unknown[]> {
    const url = `${this.base}/session/${encodeURIComponent(sessionID)}/view?format=${format}&sdk=${sdk}`;
    let response: Response;
    try {
      response = await this.fetch(url, { headers: this.headers() });
    } catch (error) {
      throw new ForgeStoreError(`reading session ${sessionID} from ${this.base} failed (${describe(error)})`, {
        cause: error,
      });
    }
    return this.answer(response, `reading session ${sessionID}`);
  }

  /**
   * The next request, rebuilt from the store: the session's compacted view as the AI
   * SDK's `ModelMessage[]`, ready for `streamText({ messages })` (in the shapes of AI SDK
   * major `sdk`, 7 by default).
   */
  nextRequest(sessionID: string, options: { sdk?: 5 | 6 | 7 } = {}): Promise<unknown[]> {
    return this.view(sessionID, 'model-messages', options.sdk ?? 7);
  }

  /** The session's compacted view as the AI SDK's `UIMessage[]`, for `useChat`. */
  uiMessages(sessionID: string, options: { sdk?: 5 | 6 | 7 } = {}): Promise<unknown[]> {
    return this.view(sessionID, 'ui-messages', options.sdk ?? 7);
  }

  /**
   * The tenant's parts (text, reasoning, tool input and output) holding every word of
   * `query`, best first (`GET /find`). `highlights` are indexes into `snippet` as
   * JavaScript strings count them (the server sends UTF-8 byte offsets).
   */
  async search(query: string, options: { sessionID?: string; limit?: number } = {}): Promise<SearchHit[]> {
    const params = new URLSearchParams({ query });
    if (options.sessionID !== undefined) params.set('sessionID', options.sessionID);
    if (options.limit !== undefined) params.set('limit', String(options.limit));
    let response: Response;
    try {
      response = await this.fetch(`${this.base}/find?${params}`, { headers: this.headers() });
    } catch (error) {
      throw new ForgeStoreError(`searching ${this.base} failed (${describe(error)})`, { cause: error });
    }
    const hits = (await this.answer(response, `the search for ${JSON.stringify(query)}`)) as SearchHit[];
    for (const hit of hits) {
      const bytes = encoder.encode(hit.snippet);
      const at = (n: number) => decoder.decode(bytes.subarray(0, n)).length;
      hit.highlights = hit.highlights.map(([a, b]) => [at(a), at(b)]);
    }
    return hits;
  }
}

/** One part a search found (`GET /find`). */
export interface SearchHit {
  sessionID: string;
  messageID: string;
  partID: string;
  /** The part's type: `text`, `reasoning` or `tool`. */
  type: string;
  /** Relevance, higher is better; comparable within one answer. */
  score: number;
  /** The part's text around the first matching word. */
  snippet: string;
  /** `[start, end)` of each matching word in `snippet`. */
  highlights: [number, number][];
}

function readerOf<T>(source: ReadableStream<T> | AsyncIterable<T>): ReadableStreamDefaultReader<T> {
  if (source instanceof ReadableStream) return source.getReader();
  const iterator = source[Symbol.asyncIterator]();
  return new ReadableStream<T>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel(reason) {
      await iterator.return?.(reason);
    },
  }).getReader();
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause as { code?: string; message?: string } | undefined;
    return cause?.code ? `${error.message}: ${cause.code}` : error.message;
  }
  return String(error);
}
