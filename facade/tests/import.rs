//! Import is all or nothing: a store that fails in the middle of an input leaves the
//! store as it was before the import, on a real redb file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_store::backend::{Forward, LocalBus};
use forge_store::{
    CoreError, Engine, Envelope, Error, Forge, ImportReport, SessionId, Store, SyncEvent, TenantId,
};
use serde_json::{json, Value};

/// A redb store whose `apply` fails, as a full disk would, for a batch that writes
/// the message `fail_on` — and, when `sticky`, for every batch after that.
#[derive(Debug)]
struct Failing {
    inner: Arc<dyn Store>,
    fail_on: String,
    sticky: bool,
    failed: AtomicBool,
}

#[async_trait]
impl Forward for Failing {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<(), CoreError> {
        let hit = batch.iter().any(|e| {
            matches!(&e.event, SyncEvent::MessageUpdated { info } if info.id.as_str() == self.fail_on)
        });
        if hit || (self.sticky && self.failed.load(Ordering::SeqCst)) {
            self.failed.store(true, Ordering::SeqCst);
            return Err(CoreError::backend("redb", false, "No space left on device"));
        }
        self.inner.apply(batch).await
    }
}

/// A redb file, and a Forge on it whose store fails on `fail_on`.
async fn failing_forge(dir: &tempfile::TempDir, fail_on: &str, sticky: bool) -> Forge {
    let url = format!("redb://{}", dir.path().join("forge.redb").display());
    let inner = forge_store::open_store(&url).await.expect("redb");
    let store = Arc::new(Failing {
        inner,
        fail_on: fail_on.to_owned(),
        sticky,
        failed: AtomicBool::new(false),
    });
    Forge::new(Engine::new(store, Arc::new(LocalBus::new())))
}

fn message(id: &str, session: &str, parts: &[(&str, &str)]) -> Value {
    let parts: Vec<Value> = parts
        .iter()
        .map(|(pid, text)| {
            json!({"id": pid, "sessionID": session, "messageID": id, "type": "text", "text": text})
        })
        .collect();
    json!({
        "info": {"id": id, "sessionID": session, "role": "user",
                 "time": {"created": 5}, "agent": "build"},
        "parts": parts
    })
}

fn jsonl(messages: &[Value]) -> String {
    messages
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Imports `text` for the default tenant, without following its progress.
async fn import(forge: &Forge, text: &str) -> Result<ImportReport, Error> {
    forge
        .import_str(&TenantId::default(), text, &|_, _| {})
        .await
}

/// Every session of the tenant with its whole history, as JSON.
async fn everything(forge: &Forge) -> Value {
    let tenant = TenantId::default();
    let mut out = Vec::new();
    for s in forge.sessions(&tenant).await.expect("sessions") {
        let history = forge
            .history_all(&tenant, &s.info.id)
            .await
            .expect("history");
        out.push(json!({"session": s.info, "messages": history}));
    }
    Value::Array(out)
}

#[tokio::test]
async fn a_document_that_fails_halfway_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let forge = failing_forge(&dir, "msg_3", false).await;
    let doc = json!({
        "info": {"id": "ses_a", "title": "a", "time": {"created": 1, "updated": 9}},
        "messages": (1..=5)
            .map(|i| message(&format!("msg_{i}"), "ses_a", &[(&format!("prt_{i}"), "hi")]))
            .collect::<Vec<_>>(),
    });
    let err = import(&forge, &doc.to_string())
        .await
        .expect_err("the store fails on msg_3");
    assert!(matches!(err, Error::Store { .. }), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert_eq!(
        everything(&forge).await,
        json!([]),
        "nothing of it is stored"
    );
}

#[tokio::test]
async fn a_session_that_fails_takes_back_the_sessions_written_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    // Before: session B with two messages.
    let forge = failing_forge(&dir, "msg_never", false).await;
    let before = jsonl(&[
        message(
            "msg_b1",
            "ses_b",
            &[("prt_b1", "old"), ("prt_b1x", "old only")],
        ),
        message("msg_b2", "ses_b", &[("prt_b2", "untouched")]),
    ]);
    import(&forge, &before).await.unwrap();
    let stored = everything(&forge).await;
    drop(forge);

    // The import: A (new), B (overwrites msg_b1 with other parts, adds msg_b3), then C
    // (new), whose batch fails.
    let forge = failing_forge(&dir, "msg_c2", false).await;
    let import = jsonl(&[
        message("msg_a1", "ses_a", &[("prt_a1", "a")]),
        message(
            "msg_b1",
            "ses_b",
            &[("prt_b1", "new"), ("prt_b1y", "new only")],
        ),
        message("msg_b3", "ses_b", &[("prt_b3", "added")]),
        message("msg_c1", "ses_c", &[("prt_c1", "c")]),
        message("msg_c2", "ses_c", &[("prt_c2", "c")]),
    ]);
    let progress = std::sync::Mutex::new(Vec::new());
    let err = forge
        .import_str(&tenant, &import, &|done, total| {
            progress.lock().unwrap().push((done, total));
        })
        .await
        .expect_err("the store fails on msg_c2");
    assert!(err.to_string().contains("session ses_c"), "{err}");
    assert!(!err.to_string().contains("taking back"), "{err}");
    assert_eq!(*progress.lock().unwrap(), [(1, 5), (3, 5)]);
    assert_eq!(
        everything(&forge).await,
        stored,
        "the store holds what it held before the import"
    );
}

#[tokio::test]
async fn a_failure_to_take_back_is_reported_with_what_remains() {
    let dir = tempfile::tempdir().unwrap();
    let forge = failing_forge(&dir, "msg_c1", true).await;
    let text = jsonl(&[
        message("msg_a1", "ses_a", &[("prt_a1", "a")]),
        message("msg_c1", "ses_c", &[("prt_c1", "c")]),
    ]);
    let err = import(&forge, &text)
        .await
        .expect_err("the store fails from msg_c1 on");
    let text = err.to_string();
    assert!(matches!(err, Error::Store { .. }), "{text}");
    assert!(
        text.contains("taking back what the import wrote failed too"),
        "{text}"
    );
    assert!(text.contains("sessions ses_a keep it"), "{text}");
}

#[tokio::test]
async fn the_report_counts_what_was_stored_and_what_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let forge = failing_forge(&dir, "msg_never", false).await;
    let first = jsonl(&[message("msg_1", "ses_a", &[("prt_1", "x"), ("prt_2", "y")])]);
    let report = import(&forge, &first).await.unwrap();
    let s = &report.sessions[0];
    assert_eq!(
        (s.session_written, s.messages, s.parts, s.replaced),
        (true, 1, 2, 0)
    );
    let again = jsonl(&[
        message("msg_1", "ses_a", &[("prt_1", "x")]),
        message("msg_2", "ses_a", &[("prt_3", "z")]),
    ]);
    let report = import(&forge, &again).await.unwrap();
    let s = &report.sessions[0];
    assert_eq!(
        (s.session_written, s.messages, s.parts, s.replaced),
        (false, 2, 2, 1)
    );
    let history = forge
        .history_all(&tenant, &SessionId::from("ses_a"))
        .await
        .unwrap();
    let parts: Vec<usize> = history.iter().map(|m| m.parts.len()).collect();
    // An overwritten message keeps a part the import does not list: upserts only.
    assert_eq!(parts, [2, 1]);
}

/// A writer named `holder` on `store`, as another process on the same database is.
fn claiming(
    store: &Arc<forge_store::backend::MemoryStore>,
    holder: &str,
    on_held: forge_store::OnHeld,
) -> Forge {
    let store: Arc<dyn Store> = store.clone();
    let policy = forge_store::ClaimPolicy::holder(holder).on_held(on_held);
    Forge::new(Engine::direct_claiming(
        store,
        Arc::new(LocalBus::new()),
        policy,
    ))
}

#[tokio::test]
async fn an_import_reads_what_it_replaces_only_once_it_holds_the_session() {
    // Another writer holds the session and writes the import's message while the import
    // waits for it: the import, once it holds the session, must plan over that message
    // (it reports it replaced, and would restore it on failure).
    let store = Arc::new(forge_store::backend::MemoryStore::new());
    let tenant = TenantId::default();
    let text = jsonl(&[message("msg_1", "ses_plan", &[("prt_1", "imported")])]);
    let first = claiming(&store, "serve@test:1", forge_store::OnHeld::Fail);
    let mut info = forge_store::model::Session::new("held", 1);
    info.id = SessionId::from("ses_plan");
    first.create_session(&tenant, info).await.unwrap();
    let second = claiming(
        &store,
        "import@test:2",
        forge_store::OnHeld::Wait(std::time::Duration::from_secs(10)),
    );
    let importing = {
        let (second, tenant, text) = (second.clone(), tenant.clone(), text.clone());
        tokio::spawn(async move { second.import_str(&tenant, &text, &|_, _| {}).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    first.import_str(&tenant, &text, &|_, _| {}).await.unwrap();
    first.close().await.unwrap();
    let report = importing.await.unwrap().unwrap();
    assert_eq!(report.sessions.len(), 1);
    assert_eq!(
        report.sessions[0].replaced, 1,
        "the message the holder wrote while the import waited"
    );
}
