//! A server on a loopback port over a real backend, and an SSE reader.
#![allow(dead_code)]

use std::time::Duration;

use forge_server::{Access, ServeError, ServerOptions, Shutdown, Tokens};
use forge_store::{Forge, OpenOptions, TenantId};
use futures::StreamExt;
use serde_json::Value;
use tokio::task::JoinHandle;

pub const TOKEN_A: &str = "token-of-tenant-a";
pub const TOKEN_B: &str = "token-of-tenant-b";

pub fn tenant(name: &str) -> TenantId {
    TenantId::new(name).expect("valid tenant")
}

/// Tokens for tenants `acme` (`TOKEN_A`) and `beta` (`TOKEN_B`).
pub fn two_tenants() -> Access {
    let mut tokens = Tokens::new();
    tokens.insert_plain(TOKEN_A, tenant("acme"));
    tokens.insert_plain(TOKEN_B, tenant("beta"));
    Access::Tokens(tokens)
}

pub struct TestServer {
    pub base: String,
    pub forge: Forge,
    pub shutdown: Shutdown,
    pub task: JoinHandle<Result<(), ServeError>>,
    pub http: reqwest::Client,
    dir: Option<tempfile::TempDir>,
}

/// A server over a fresh redb file.
pub async fn redb_server(options: ServerOptions, open: OpenOptions) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("redb://{}", dir.path().join("serve.redb").display());
    let forge = forge_store::open_with(&url, open).await.expect("open redb");
    let mut s = start(forge, options).await;
    s.dir = Some(dir);
    s
}

/// A server over a fresh redb file, with a session `id` of tenant A (`TOKEN_A`).
pub async fn server_with_session(
    options: ServerOptions,
    open: OpenOptions,
    id: &str,
) -> TestServer {
    let s = redb_server(options, open).await;
    s.create(TOKEN_A, id).await;
    s
}

/// As [`server_with_session`], with the two tenants of [`two_tenants`] and default
/// options.
pub async fn session_server(id: &str) -> TestServer {
    server_with_session(ServerOptions::new(two_tenants()), OpenOptions::new(), id).await
}

/// A server over `forge`.
pub async fn start(forge: Forge, options: ServerOptions) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = Shutdown::new();
    let task = tokio::spawn(forge_server::serve(
        listener,
        forge.clone(),
        options,
        shutdown.clone(),
    ));
    TestServer {
        base: format!("http://{addr}"),
        forge,
        shutdown,
        task,
        http: reqwest::Client::new(),
        dir: None,
    }
}

impl TestServer {
    pub fn get(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
    }

    pub fn post(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
    }

    pub fn delete(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.http
            .delete(format!("{}{path}", self.base))
            .bearer_auth(token)
    }

    /// `GET path` as JSON, asserting the status.
    pub async fn json(&self, path: &str, token: &str, status: u16) -> Value {
        let r = self.get(path, token).send().await.expect("request");
        assert_eq!(r.status().as_u16(), status, "GET {path}");
        r.json().await.expect("JSON body")
    }

    /// Creates a session with this id.
    pub async fn create(&self, token: &str, id: &str) {
        let r = self
            .post("/session", token)
            .json(&serde_json::json!({"id": id, "title": id}))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    }

    /// Uploads a whole stream to a session; returns the status and the body.
    pub async fn upload(&self, token: &str, session: &str, ndjson: String) -> (u16, Value) {
        let r = self
            .post(&format!("/session/{session}/stream"), token)
            .body(ndjson)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.expect("JSON body"))
    }

    /// Starts an upload to `session` whose lines are sent one by one.
    pub fn upload_lines(&self, token: &str, session: &str, buffer: usize) -> Upload {
        let (tx, rx) = futures::channel::mpsc::channel::<Result<String, std::io::Error>>(buffer);
        let req = self
            .post(&format!("/session/{session}/stream"), token)
            .body(reqwest::Body::wrap_stream(rx));
        Upload {
            tx,
            task: tokio::spawn(async move { req.send().await }),
        }
    }

    pub async fn stop(self) {
        self.shutdown.trigger();
        self.task
            .await
            .expect("server task")
            .expect("server stops cleanly");
    }
}

/// Sends `req` and asserts the answer's status (the message names the request).
pub async fn sent(req: reqwest::RequestBuilder, status: u16) -> reqwest::Response {
    let (client, req) = req.build_split();
    let req = req.expect("a well-formed request");
    let what = format!("{} {}", req.method(), req.url());
    let r = client.execute(req).await.expect("request");
    assert_eq!(r.status().as_u16(), status, "{what}");
    r
}

/// Polls `request` until it is answered with a success; panics after `limit`, naming
/// `what`.
pub async fn until_up(what: &str, limit: Duration, request: impl Fn() -> reqwest::RequestBuilder) {
    let start = std::time::Instant::now();
    loop {
        let up = request().send().await;
        if up.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(start.elapsed() < limit, "{what} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The header `name` of `r` as text, if it has one.
pub fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii").to_owned())
}

/// An upload in progress: its body is sent a line at a time.
pub struct Upload {
    tx: futures::channel::mpsc::Sender<Result<String, std::io::Error>>,
    pub task: JoinHandle<reqwest::Result<reqwest::Response>>,
}

impl Upload {
    /// Sends one line (a newline is added).
    pub async fn line(&mut self, line: &str) {
        use futures::SinkExt;
        self.tx
            .send(Ok(format!("{line}\n")))
            .await
            .expect("the upload takes the line");
    }

    /// Whether the server has answered already.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the answer while the body stays open (the server ends it early).
    pub async fn answer(&mut self) -> reqwest::Response {
        (&mut self.task)
            .await
            .expect("upload task")
            .expect("response")
    }

    /// Ends the body and waits for the answer.
    pub async fn finish(self) -> reqwest::Response {
        drop(self.tx);
        self.task.await.expect("upload task").expect("response")
    }
}

/// One SSE event.
#[derive(Clone, Debug)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: Value,
}

impl SseEvent {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

/// An SSE connection read event by event.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    pub status: u16,
}

impl SseReader {
    pub async fn connect(server: &TestServer, path: &str, token: &str, last: Option<&str>) -> Self {
        let mut req = server.get(path, token);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l);
        }
        let r = req.send().await.expect("SSE request");
        let status = r.status().as_u16();
        Self {
            body: r.bytes_stream().boxed(),
            buf: String::new(),
            status,
        }
    }

    /// Connects and reads the `server.connected` event every stream starts with.
    pub async fn connected(
        server: &TestServer,
        path: &str,
        token: &str,
        last: Option<&str>,
    ) -> Self {
        let mut sse = Self::connect(server, path, token, last).await;
        assert_eq!(sse.expect().await.kind(), "server.connected", "{path}");
        sse
    }

    /// The next event, `None` when the stream ended cleanly, `Err` when it was cut.
    /// Panics after 10 s of silence.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, String> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..pos + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a comment
                }
                let data = serde_json::from_str(&data).map_err(|e| format!("bad data: {e}"))?;
                return Ok(Some(SseEvent { id, data }));
            }
            match tokio::time::timeout(Duration::from_secs(10), self.body.next()).await {
                Err(tokio::time::error::Elapsed { .. }) => {
                    panic!("no SSE event for 10 s; buffered: {:?}", self.buf)
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(bytes))) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
            }
        }
    }

    /// The next event that is not a heartbeat; panics if the stream ends.
    pub async fn expect(&mut self) -> SseEvent {
        loop {
            match self.next().await {
                Ok(Some(e)) if e.kind() == "server.heartbeat" => {}
                Ok(Some(e)) => return e,
                other => panic!("the stream ended: {other:?}"),
            }
        }
    }
}

/// A replay-format turn: a user line, then an answer with a text block of `deltas`
/// deltas of `chunk` each, closed by finish.
pub fn turn(prompt: &str, deltas: usize, chunk: &str) -> Vec<String> {
    let mut lines = vec![
        serde_json::json!({"type": "user", "text": prompt}).to_string(),
        r#"{"type":"start"}"#.to_owned(),
        r#"{"type":"start-step"}"#.to_owned(),
        r#"{"type":"text-start","id":"t1"}"#.to_owned(),
    ];
    for _ in 0..deltas {
        lines
            .push(serde_json::json!({"type": "text-delta", "id": "t1", "text": chunk}).to_string());
    }
    lines.push(r#"{"type":"text-end","id":"t1"}"#.to_owned());
    lines.push(
        r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":10,"outputTokens":5}}"#
            .to_owned(),
    );
    lines.push(r#"{"type":"finish","finishReason":"stop"}"#.to_owned());
    lines
}

pub fn ndjson(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}
