//! The inputs: reference uploads, retargeted import documents, the writers' requests.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::common::{example, normalized};
use crate::serve::Server;
use crate::{CLIENTS_PER_WRITER, REQUEST_TIMEOUT, STREAMS, TITLE};

/// One stream uploaded alone: its normalized export and the `seq` it leaves.
pub(crate) struct Reference {
    /// Normalized ([`normalized`]).
    pub(crate) export: Value,
    /// As exported (session `ses_ref_K`).
    pub(crate) stored: Value,
    pub(crate) seq: u64,
    pub(crate) text: String,
}

/// What a session must hold at the end.
pub(crate) enum Expect {
    /// Equal to a reference upload of stream `k` (normalized), with its seq.
    Streamed(usize),
    /// Equal to this document; `importers` imports of `events` events each.
    Imported {
        doc: Value,
        events: u64,
        importers: u64,
    },
}

/// `template` (an export document of session `from`) as session `sid`, with message
/// and part ids made its own.
pub(crate) fn retargeted(template: &str, from: &str, sid: &str, tag: &str) -> Value {
    let text = template
        .replace(from, sid)
        .replace("\"msg_", &format!("\"msg_{tag}_"))
        .replace("\"prt_", &format!("\"prt_{tag}_"));
    serde_json::from_str(&text).expect("retargeted document")
}

/// Events one import of `doc` commits: the session, each message, each part.
pub(crate) fn import_events(doc: &Value) -> u64 {
    let messages = doc["messages"].as_array().expect("messages");
    let parts: usize = messages
        .iter()
        .map(|m| m["parts"].as_array().map_or(0, Vec::len))
        .sum();
    (1 + messages.len() + parts) as u64
}

/// A request of a writer.
#[derive(Clone)]
pub(crate) enum Job {
    Stream {
        tenant: usize,
        sid: String,
        stream: usize,
    },
    Import {
        tenant: usize,
        sid: String,
        body: Arc<String>,
    },
}

impl Job {
    pub(crate) fn sid(&self) -> &str {
        match self {
            Job::Stream { sid, .. } | Job::Import { sid, .. } => sid,
        }
    }
}

/// Runs `jobs` against the server at `base` with [`CLIENTS_PER_WRITER`] requests at a
/// time; returns the failures.
pub(crate) async fn drive(
    client: reqwest::Client,
    base: String,
    tokens: Arc<Vec<String>>,
    refs: Arc<Vec<Reference>>,
    jobs: Vec<Job>,
) -> Vec<String> {
    let queue = Arc::new(Mutex::new(VecDeque::from(jobs)));
    let mut slots = Vec::new();
    for _ in 0..CLIENTS_PER_WRITER {
        let (client, base, tokens, refs, queue) = (
            client.clone(),
            base.clone(),
            Arc::clone(&tokens),
            Arc::clone(&refs),
            Arc::clone(&queue),
        );
        slots.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            loop {
                let Some(job) = queue.lock().expect("queue").pop_front() else {
                    break;
                };
                let request = match &job {
                    Job::Stream {
                        tenant,
                        sid,
                        stream,
                    } => client
                        .post(format!("{base}/session/{sid}/stream?title={TITLE}"))
                        .bearer_auth(&tokens[*tenant])
                        .header("content-type", "application/x-ndjson")
                        .body(refs[*stream].text.clone()),
                    Job::Import { tenant, body, .. } => client
                        .post(format!("{base}/import"))
                        .bearer_auth(&tokens[*tenant])
                        .header("content-type", "application/json")
                        .body(body.as_str().to_owned()),
                };
                match request.timeout(REQUEST_TIMEOUT).send().await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => {
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        failures.push(format!("{base} {}: {status} {text}", job.sid()));
                    }
                    Err(e) => failures.push(format!("{base} {}: {e}", job.sid())),
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for s in slots {
        failures.extend(s.await.expect("client task"));
    }
    failures
}

/// Uploads every stream alone to a `memory://` server: the reference each streamed
/// session must equal.
pub(crate) fn references(rt: &tokio::runtime::Runtime, dir: &Path) -> Vec<Reference> {
    let mut server = Server::start(
        &["--backend".into(), "memory://".into()],
        &["--no-auth"],
        dir,
        "reference",
    );
    let client = reqwest::Client::new();
    let refs = rt.block_on(async {
        let mut refs = Vec::new();
        for (k, stream) in STREAMS.iter().enumerate() {
            let text = std::fs::read_to_string(example(stream)).expect("read the stream");
            let sid = format!("ses_ref_{k}");
            let r = client
                .post(server.url(&format!("/session/{sid}/stream?title={TITLE}")))
                .body(text.clone())
                .send()
                .await
                .expect("upload to the reference server");
            assert!(r.status().is_success(), "reference upload of {stream}");
            let r = client
                .get(server.url(&format!("/session/{sid}")))
                .send()
                .await
                .expect("read the reference session");
            let seq: u64 = r
                .headers()
                .get("x-forge-seq")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .expect("x-forge-seq");
            let export: Value = client
                .get(server.url(&format!("/session/{sid}/export")))
                .send()
                .await
                .expect("export the reference session")
                .json()
                .await
                .expect("export JSON");
            refs.push(Reference {
                export: normalized(&export),
                stored: export,
                seq,
                text,
            });
        }
        refs
    });
    let status = server.stop();
    assert!(status.success(), "reference server: {}", server.stderr());
    refs
}
