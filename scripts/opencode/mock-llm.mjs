// A scripted OpenAI-compatible chat-completions server for recording opencode fixtures.
// Listens on 127.0.0.1 only. POST /v1/chat/completions with stream:true answers with SSE
// `chat.completion.chunk`s. What it answers is decided by markers in the last user message:
//   [[text]]      plain text answer
//   [[think]]     reasoning_content, then text
//   [[read:PATH]] a `read` tool call on PATH, then (after the tool result) a final text answer
//   [[bash:CMD]]  a `bash` tool call running CMD, then a final text answer
//   [[write:PATH]] a `write` tool call creating PATH, then a final text answer
//   [[two:PATH|CMD]] two tool calls (read PATH + bash CMD) in one step, then a final text answer
//   [[slow]]      a long text answer streamed slowly (to be aborted)
//   [[big]]       a long text answer with large usage numbers (pushes the context toward its limit)
//   [[turn:FILE]] one turn of forge-store's workloads, as scripts/peers/peer.py writes it
//                 (FILE: {reasoning, texts, calls: [{input, output_file}]}): step 1 streams
//                 the reasoning, the first text and one `bash` call per tool call,
//                 `cat OUTPUT_FILE` with a description that brings its input JSON to the
//                 size of the call's; step 2 the second text; in 8-character deltas
//   [[w1:DIR]]    one W1 turn (docs/backends.md, "Workload W1"): 2,000 B of reasoning and
//                 three `bash` calls of 300 B of input each, `cat DIR/w1-out-N.txt` (files of
//                 4,000 B that storage-cost.sh writes), then 2,400 B of text; content is
//                 random lowercase letters, as in W1, in 8-byte deltas
// opencode's compaction request (its summarization prompt) gets a summary; other requests
// without tools (title generation) get a short title. Usage: node mock-llm.mjs PORT [LOGFILE]
import http from "node:http";
import fs from "node:fs";

const port = Number(process.argv[2] || 0);
const logFile = process.argv[3];
let callSeq = 0;

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((c) => (c && c.type === "text" ? c.text : "")).join("\n");
  return "";
}

// Random lowercase letters from a fixed-seed generator (xorshift32): W1's content.
let seed = 0x9e3779b9;
function letters(n) {
  let out = "";
  for (let i = 0; i < n; i++) {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    out += String.fromCharCode(97 + ((seed >>> 0) % 26));
  }
  return out;
}

function plan(body) {
  const msgs = body.messages || [];
  const last = msgs[msgs.length - 1] || {};
  const system = msgs.filter((m) => m.role === "system").map((m) => textOf(m.content)).join("\n");
  const hasTools = Array.isArray(body.tools) && body.tools.length > 0;
  const lastUser = [...msgs].reverse().find((m) => m.role === "user");
  const userText = lastUser ? textOf(lastUser.content) : "";
  const lastText = textOf(last.content);

  // opencode's compaction request: a summarization system prompt, the history in one user message.
  if (/summarization agent/i.test(system) || /<conversation>/.test(userText)) {
    return {
      kind: "summary",
      text:
        "## Objective\n- Exercise opencode with text, reasoning and tool turns.\n\n" +
        "## Important Details\n- (none)\n\n## Work State\n### Completed\n- Read hello.txt; ran a shell command.\n\n" +
        "### Active\n- (none)\n\n### Blocked\n- (none)\n\n## Next Move\n1. (none)\n\n## Relevant Files\n- hello.txt: the file that was read",
    };
  }
  const turn = userText.match(/\[\[turn:([^\]]+)\]\]/);
  if (turn) {
    const t = JSON.parse(fs.readFileSync(turn[1], "utf8"));
    if (last.role === "tool") return { kind: "text", text: t.texts[1] || "", piece: 8 };
    const calls = t.calls.map((c) => {
      const command = `cat ${c.output_file}`;
      const size = Buffer.byteLength(JSON.stringify(c.input));
      const bare = Buffer.byteLength(JSON.stringify({ command, description: "" }));
      const source = Object.values(c.input).map(String).join(" ");
      return { name: "bash", args: { command, description: source.slice(0, Math.max(0, size - bare)) } };
    });
    return { kind: "tools", reasoning: t.reasoning, text: t.texts[0] || "", calls, piece: 8 };
  }
  const w1 = userText.match(/\[\[w1:([^\]]+)\]\]/);
  if (w1 && last.role === "tool") {
    return { kind: "text", text: letters(2400), piece: 8 };
  }
  if (w1) {
    const calls = [1, 2, 3].map((n) => {
      const command = `cat ${w1[1]}/w1-out-${n}.txt`;
      // Pad the description so that the arguments, as JSON, are 300 bytes.
      const bare = JSON.stringify({ command, description: "" }).length;
      return { name: "bash", args: { command, description: letters(Math.max(0, 300 - bare)) } };
    });
    return { kind: "tools", reasoning: letters(2000), calls, piece: 8 };
  }
  if (last.role === "tool") {
    return { kind: "final", text: "Done: the tool finished and I looked at its output." };
  }
  let m;
  if ((m = userText.match(/\[\[read:([^\]]+)\]\]/))) {
    return { kind: "tools", calls: [{ name: "read", args: { filePath: m[1] } }], text: "Let me read that file." };
  }
  if ((m = userText.match(/\[\[bash:([^\]]+)\]\]/))) {
    return {
      kind: "tools",
      calls: [{ name: "bash", args: { command: m[1], description: "Run the requested command" } }],
    };
  }
  if ((m = userText.match(/\[\[write:([^\]]+)\]\]/))) {
    return {
      kind: "tools",
      calls: [{ name: "write", args: { filePath: m[1], content: "written by the fixture run\n" } }],
    };
  }
  if ((m = userText.match(/\[\[two:([^\]|]+)\|([^\]]+)\]\]/))) {
    return {
      kind: "tools",
      calls: [
        { name: "read", args: { filePath: m[1] } },
        { name: "bash", args: { command: m[2], description: "List the project" } },
      ],
    };
  }
  if (/\[\[think\]\]/.test(userText)) {
    return { kind: "text", reasoning: "The user wants a short answer. I will give one.", text: "Here is a short answer after thinking." };
  }
  if (/\[\[slow\]\]/.test(userText)) {
    return { kind: "text", text: "This answer streams slowly so that it can be aborted. ".repeat(20), delay: 150 };
  }
  if (/\[\[big\]\]/.test(userText)) {
    return { kind: "text", text: "A long answer. ".repeat(40).trim(), usage: { prompt_tokens: 7000, completion_tokens: 600 } };
  }
  if (!hasTools && /title/i.test(system + "\n" + userText)) {
    return { kind: "title", text: "Fixture session" };
  }
  return { kind: "text", text: "Hello! This is a plain text answer from the mock model." };
}

function chunks(p, model) {
  const id = "chatcmpl-mock-" + ++callSeq;
  const created = Math.floor(Date.now() / 1000);
  const base = (delta, finish = null) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const out = [base({ role: "assistant", content: "" })];
  const size = p.piece || 12;
  const split = (s) => s.match(new RegExp(`.{1,${size}}`, "gs")) || [];
  if (p.reasoning) for (const piece of split(p.reasoning)) out.push(base({ reasoning_content: piece }));
  if (p.text) for (const piece of split(p.text)) out.push(base({ content: piece }));
  let finish = "stop";
  if (p.calls) {
    p.calls.forEach((c, i) => {
      const args = JSON.stringify(c.args);
      const callId = `call_${callSeq}_${i}`;
      out.push(base({ tool_calls: [{ index: i, id: callId, type: "function", function: { name: c.name, arguments: "" } }] }));
      for (const piece of split(args)) out.push(base({ tool_calls: [{ index: i, function: { arguments: piece } }] }));
    });
    finish = "tool_calls";
  }
  out.push(base({}, finish));
  const usage = p.usage || { prompt_tokens: 1200, completion_tokens: 40 };
  out.push({
    id,
    object: "chat.completion.chunk",
    created,
    model,
    choices: [],
    usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
  });
  return out;
}

const server = http.createServer((req, res) => {
  let raw = "";
  req.on("data", (d) => (raw += d));
  req.on("end", async () => {
    if (req.method === "GET" && req.url.endsWith("/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [{ id: "mock-1", object: "model" }] }));
      return;
    }
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    let body = {};
    try {
      body = JSON.parse(raw);
    } catch {}
    const p = plan(body);
    if (logFile) fs.appendFileSync(logFile, JSON.stringify({ at: Date.now(), plan: p, request: body }) + "\n");
    const list = chunks(p, body.model || "mock-1");
    if (!body.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id: list[0].id,
          object: "chat.completion",
          created: list[0].created,
          model: list[0].model,
          choices: [{ index: 0, message: { role: "assistant", content: p.text || "" }, finish_reason: "stop" }],
          usage: list[list.length - 1].usage,
        }),
      );
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    for (const c of list) {
      res.write(`data: ${JSON.stringify(c)}\n\n`);
      if (res.destroyed) return;
      await new Promise((r) => setTimeout(r, p.delay || 5));
    }
    res.write("data: [DONE]\n\n");
    res.end();
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(`mock-llm listening on 127.0.0.1:${server.address().port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
