// opencode's own client library (@opencode-ai/sdk, v2 entry) against `forge-store serve`,
// driven by server/tests/sdk.rs.
//
// Reads sessions and messages, then consumes /event through a TCP proxy that cuts the
// connection once after CUT_AFTER deltas: the SDK reconnects by itself, sending the
// Last-Event-ID it last saw, and the script checks that every delta arrived exactly
// once. Prints one JSON line `{"ready": …}` when subscribed, and one result line at the
// end.
//
// env: FORGE_URL, TOKEN, SESSION, DELTAS (expected), CUT_AFTER
import net from "node:net"
import { createOpencodeClient } from "@opencode-ai/sdk/v2"

const target = new URL(process.env.FORGE_URL)
const session = process.env.SESSION
const expected = Number(process.env.DELTAS)
const cutAfter = Number(process.env.CUT_AFTER)

// A proxy in front of the server that can drop every connection it carries.
const sockets = new Set()
const lastEventIds = []
const proxy = net.createServer((client) => {
  const upstream = net.connect(Number(target.port), target.hostname)
  sockets.add(client)
  sockets.add(upstream)
  // The client only sends GETs (no bodies): every request head ends at a blank line,
  // also when a kept-alive connection carries several.
  let pending = ""
  client.on("data", (chunk) => {
    pending += chunk.toString("latin1")
    let end
    while ((end = pending.indexOf("\r\n\r\n")) >= 0) {
      const lines = pending.slice(0, end).split("\r\n")
      pending = pending.slice(end + 4)
      if (lines[0].startsWith("GET /event")) {
        const h = lines.find((l) => l.toLowerCase().startsWith("last-event-id:"))
        lastEventIds.push(h ? h.slice(h.indexOf(":") + 1).trim() : null)
      }
    }
    upstream.write(chunk)
  })
  upstream.on("data", (chunk) => client.write(chunk))
  const close = () => {
    client.destroy()
    upstream.destroy()
    sockets.delete(client)
    sockets.delete(upstream)
  }
  client.on("error", close)
  upstream.on("error", close)
  client.on("close", close)
  upstream.on("close", close)
})
await new Promise((ok) => proxy.listen(0, "127.0.0.1", ok))
const baseUrl = `http://127.0.0.1:${proxy.address().port}`

const client = createOpencodeClient({
  baseUrl,
  headers: { Authorization: `Bearer ${process.env.TOKEN}` },
})

const result = {}
const list = await client.session.list({ limit: 10 })
if (list.error) throw new Error(`session.list: ${JSON.stringify(list.error)}`)
result.sessions = list.data.map((s) => s.id)
const one = await client.session.get({ sessionID: session })
if (one.error) throw new Error(`session.get: ${JSON.stringify(one.error)}`)
result.title = one.data.title
const missing = await client.session.get({ sessionID: "ses_missing" })
result.missing = { status: missing.response.status, error: missing.error }

const ac = new AbortController()
const { stream } = await client.event.subscribe({}, { signal: ac.signal, sseDefaultRetryDelay: 500 })
let text = ""
let deltas = 0
let cut = false
let reloads = 0
let other = 0
for await (const ev of stream) {
  if (ev.type === "server.connected" && !result.ready) {
    result.ready = true
    console.log(JSON.stringify({ ready: true }))
  }
  if (ev.type === "server.reload") reloads++
  const props = ev.properties ?? {}
  if (props.sessionID !== undefined && props.sessionID !== session) other++
  if (ev.type === "message.part.delta" && props.sessionID === session) {
    text += props.delta
    deltas++
    if (deltas === cutAfter && !cut) {
      cut = true
      for (const s of sockets) s.destroy()
    }
  }
  if (ev.type === "session.idle" && props.sessionID === session) break
}
ac.abort()

const messages = await client.session.messages({ sessionID: session, limit: 2 })
if (messages.error) throw new Error(`session.messages: ${JSON.stringify(messages.error)}`)
result.messages = messages.data.map((m) => ({ role: m.info.role, parts: m.parts.map((p) => p.type) }))
result.nextCursor = messages.response.headers.get("x-next-cursor")
// Fork before the session's last message (opencode's fork point): the new session
// holds the others, copied, and names its source.
const all = await client.session.messages({ sessionID: session })
if (all.error) throw new Error(`session.messages: ${JSON.stringify(all.error)}`)
const last = all.data[all.data.length - 1].info.id
const forked = await client.session.fork({ sessionID: session, messageID: last })
if (forked.error) throw new Error(`session.fork: ${JSON.stringify(forked.error)}`)
const copied = await client.session.messages({ sessionID: forked.data.id })
if (copied.error) throw new Error(`session.messages of the fork: ${JSON.stringify(copied.error)}`)
result.fork = {
  parentID: forked.data.parentID,
  title: forked.data.title,
  source: all.data.map((m) => m.parts.map((p) => p.type).join(",")),
  copied: copied.data.map((m) => m.parts.map((p) => p.type).join(",")),
  sameIds: copied.data.some((m) => all.data.some((o) => o.info.id === m.info.id)),
}
// Revert to the last message, read, restore, read again.
const reverted = await client.session.revert({ sessionID: session, messageID: last })
if (reverted.error) throw new Error(`session.revert: ${JSON.stringify(reverted.error)}`)
const hidden = await client.session.messages({ sessionID: session })
const unreverted = await client.session.unrevert({ sessionID: session })
if (unreverted.error) throw new Error(`session.unrevert: ${JSON.stringify(unreverted.error)}`)
const shownAgain = await client.session.messages({ sessionID: session })
result.revert = {
  mark: reverted.data.revert,
  whileReverted: hidden.data.length,
  cleared: unreverted.data.revert ?? null,
  afterRestore: shownAgain.data.length,
  total: all.data.length,
}
// opencode's v2 revert routes: stage (hide the last message), clear (show it again),
// stage again and commit (the last message is gone).
const staged = await client.v2.session.revert.stage({ sessionID: session, messageID: last })
if (staged.error) throw new Error(`v2 revert.stage: ${JSON.stringify(staged.error)}`)
const whileStaged = await client.session.messages({ sessionID: session })
const cleared = await client.v2.session.revert.clear({ sessionID: session })
if (cleared.error) throw new Error(`v2 revert.clear: ${JSON.stringify(cleared.error)}`)
const afterClear = await client.session.messages({ sessionID: session })
const unknownMark = await client.v2.session.revert.stage({ sessionID: session, messageID: "msg_nope" })
await client.v2.session.revert.stage({ sessionID: session, messageID: last })
const committed = await client.v2.session.revert.commit({ sessionID: session })
if (committed.error) throw new Error(`v2 revert.commit: ${JSON.stringify(committed.error)}`)
const afterCommit = await client.session.messages({ sessionID: session })
const row = await client.session.get({ sessionID: session })
result.v2revert = {
  staged: staged.data.data,
  whileStaged: whileStaged.data.length,
  clearStatus: cleared.response.status,
  afterClear: afterClear.data.length,
  missingStatus: unknownMark.response.status,
  commitStatus: committed.response.status,
  afterCommit: afterCommit.data.length,
  afterCommitIds: afterCommit.data.map((m) => m.info.id),
  markAfterCommit: row.data.revert ?? null,
  last,
}
result.deltas = deltas
result.expected = expected
result.text = text
result.reloads = reloads
result.otherSessions = other
result.lastEventIds = lastEventIds
console.log(JSON.stringify(result))
proxy.close()
process.exit(0)
