//! What the store holds afterwards, and the session locks sampled meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use forge_store::{SessionId, TenantId};

use crate::common::normalized;
use crate::plan::{Expect, Reference};
use crate::{STREAMS, TENANTS};

/// What [`watch_locks`] saw.
#[derive(Debug, Default)]
pub(crate) struct LockFigures {
    pub(crate) samples: u64,
    /// The most session locks one writer transaction held at once.
    pub(crate) max_held: i64,
    /// Samples in which a writer transaction waited for a session lock.
    pub(crate) samples_with_waiters: u64,
    /// The most transactions waiting for session locks at once.
    pub(crate) max_waiting: i64,
}

/// Samples the advisory (session) locks of the connections named `app` until
/// `watching` is cleared.
pub(crate) async fn watch_locks(
    base: String,
    app: String,
    watching: Arc<AtomicBool>,
) -> LockFigures {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&base)
        .await
        .expect("connect the lock watcher");
    let mut f = LockFigures::default();
    while watching.load(Ordering::SeqCst) {
        let (held, waiting): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(max(held), 0)::bigint, coalesce(sum(waiting), 0)::bigint FROM (
                 SELECT count(*) FILTER (WHERE l.granted) AS held,
                        count(*) FILTER (WHERE NOT l.granted) AS waiting
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND a.application_name = $1
                 GROUP BY l.pid) per_transaction",
        )
        .bind(&app)
        .fetch_one(&mut conn)
        .await
        .expect("sample pg_locks");
        f.samples += 1;
        f.max_held = f.max_held.max(held);
        f.max_waiting = f.max_waiting.max(waiting);
        f.samples_with_waiters += u64::from(waiting > 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let _ = conn.close().await;
    f
}

/// Reads every tenant's sessions back through the library and compares them with what
/// was written; returns sessions, messages and parts checked.
pub(crate) async fn verify(
    url: &str,
    expect: &BTreeMap<(usize, String), Expect>,
    refs: &[Reference],
) -> (usize, usize, usize) {
    let forge = forge_store::open(url).await.expect("open the store");
    let mut problems = Vec::new();
    let (mut messages, mut parts) = (0, 0);
    for (t, name) in TENANTS.iter().enumerate() {
        let tenant = TenantId::new(name).expect("tenant");
        let listed: BTreeMap<String, u64> = forge
            .sessions(&tenant)
            .await
            .expect("list sessions")
            .into_iter()
            .map(|s| (s.info.id.to_string(), s.seq))
            .collect();
        let wanted: BTreeSet<&String> = expect
            .keys()
            .filter(|(et, _)| *et == t)
            .map(|(_, s)| s)
            .collect();
        let got: BTreeSet<&String> = listed.keys().collect();
        if got != wanted {
            problems.push(format!(
                "{name}: sessions listed differ: missing {:?}, extra {:?}",
                wanted.difference(&got).collect::<Vec<_>>(),
                got.difference(&wanted).collect::<Vec<_>>()
            ));
        }
        for ((_, sid), want) in expect.range((t, String::new())..(t + 1, String::new())) {
            let Some(&seq) = listed.get(sid) else {
                continue;
            };
            let export = match forge.export(&tenant, &SessionId::from(sid.as_str())).await {
                Ok(e) => serde_json::to_value(e).expect("export JSON"),
                Err(e) => {
                    problems.push(format!("{name}/{sid}: export failed: {e}"));
                    continue;
                }
            };
            let ms = export["messages"].as_array().map_or(&[][..], Vec::as_slice);
            messages += ms.len();
            parts += ms
                .iter()
                .map(|m| m["parts"].as_array().map_or(0, Vec::len))
                .sum::<usize>();
            match want {
                Expect::Streamed(k) => {
                    if normalized(&export) != refs[*k].export {
                        problems.push(format!(
                            "{name}/{sid}: differs from stream {} uploaded alone",
                            STREAMS[*k]
                        ));
                    }
                    if seq != refs[*k].seq {
                        problems.push(format!(
                            "{name}/{sid}: seq {seq}, the stream alone leaves {}",
                            refs[*k].seq
                        ));
                    }
                }
                Expect::Imported {
                    doc,
                    events,
                    importers,
                } => {
                    if &export != doc {
                        problems.push(format!("{name}/{sid}: differs from its import"));
                    }
                    if seq % events != 0 || seq < *events || seq > events * importers {
                        problems.push(format!(
                            "{name}/{sid}: seq {seq} is not a whole number of imports of \
                             {events} events (1 to {importers})"
                        ));
                    }
                }
            }
        }
    }
    let _ = forge.close().await;
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    (expect.len(), messages, parts)
}
