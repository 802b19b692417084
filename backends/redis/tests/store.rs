//! RedisStore against a real server: key isolation with hostile ids, atomic batches,
//! URL and connection errors.

mod common;

use std::sync::Arc;

use common::{count_prefix, env, opening, session, user_message, TestPrefix};
use forge_core::{Error, Store, SyncEvent, TenantId};
use forge_redis::RedisStore;

/// Ids built to collide under naive `prefix:tenant:session:message` keys.
const HOSTILE: [&str; 10] = [
    "a", "a:b", "b", "a:m", "", ":", "*", "61", "a\u{0}", "a:p:62",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_cannot_collide_or_reach_another_tenant() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let tenants = [
        TenantId::new("a").unwrap(),
        TenantId::new("a.b").unwrap(),
        TenantId::new("a-b").unwrap(),
    ];
    // Every (tenant, session, message, part) combination of hostile ids, with content
    // naming its own coordinates.
    let mut batch = Vec::new();
    for t in &tenants {
        for s in HOSTILE {
            batch.push(env(t, 1, SyncEvent::SessionUpdated { info: session(s) }));
            for m in HOSTILE {
                let text = format!("{t}|{s}|{m}");
                let (msg, part) = user_message(&s.into(), m, m, &text);
                batch.push(env(t, 2, SyncEvent::MessageUpdated { info: msg }));
                batch.push(env(t, 3, SyncEvent::PartUpdated { part }));
            }
        }
    }
    store.apply(&batch).await.unwrap();

    for t in &tenants {
        let sessions = store.sessions(t).await.unwrap();
        let mut want: Vec<&str> = HOSTILE.to_vec();
        want.sort_unstable();
        let got: Vec<&str> = sessions.iter().map(|s| s.info.id.as_str()).collect();
        assert_eq!(got, want, "tenant {t}");
        for s in HOSTILE {
            let all = forge_core::read_all(&store, t, &s.into(), 3).await.unwrap();
            assert_eq!(all.len(), HOSTILE.len());
            for m in &all {
                assert_eq!(m.parts.len(), 1);
                let text = common::text_of(&m.parts[0]).unwrap();
                assert_eq!(text, format!("{t}|{s}|{}", m.info.id), "crossed rows");
            }
        }
    }
    // Removing one hostile session of one tenant leaves every other row.
    store
        .apply(&[env(
            &tenants[0],
            9,
            SyncEvent::SessionDeleted {
                session_id: "a".into(),
            },
        )])
        .await
        .unwrap();
    assert_eq!(
        store.sessions(&tenants[0]).await.unwrap().len(),
        HOSTILE.len() - 1
    );
    for s in HOSTILE {
        let n = forge_core::read_all(&store, &tenants[0], &s.into(), 50)
            .await
            .unwrap()
            .len();
        assert_eq!(n, if s == "a" { 0 } else { HOSTILE.len() }, "session {s:?}");
    }
    for t in &tenants[1..] {
        assert_eq!(store.sessions(t).await.unwrap().len(), HOSTILE.len());
    }
    // Every key is under the prefix and names its tenant in a fixed position.
    let prefix = &p.prefix;
    let keys: Vec<String> =
        redis::Commands::scan_match::<_, String>(&mut p.conn(), format!("{prefix}:*"))
            .unwrap()
            .filter_map(Result::ok)
            .collect();
    let markers = [format!("{prefix}:layout"), format!("{prefix}:search")];
    for k in keys.iter().filter(|k| !markers.contains(k)) {
        let rest = k.strip_prefix(&format!("{prefix}:t:{{")).expect("layout");
        let tenant = rest.split('}').next().unwrap();
        assert!(tenants.iter().any(|t| t.as_str() == tenant), "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_writes_nothing() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = Arc::new(p.store().await);
    let t = TenantId::new("t").unwrap();
    let (msg, part) = user_message(&"s".into(), "m1", "p1", "x");
    // The part's message is removed earlier in the same batch: NotFound, nothing kept.
    let batch = vec![
        env(&t, 1, SyncEvent::SessionUpdated { info: session("s") }),
        env(&t, 2, SyncEvent::MessageUpdated { info: msg.clone() }),
        env(
            &t,
            3,
            SyncEvent::MessageRemoved {
                session_id: "s".into(),
                message_id: "m1".into(),
            },
        ),
        env(&t, 4, SyncEvent::PartUpdated { part: part.clone() }),
    ];
    let err = store.apply(&batch).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotFound {
                what: "message",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        count_prefix(&p.server, &format!("{}:t", p.prefix)),
        0,
        "a failed batch left keys"
    );

    // A session deleted and re-created in one batch comes back empty.
    store.apply(&batch[..2]).await.unwrap();
    let (m2, _) = user_message(&"s".into(), "m2", "p2", "y");
    let recreate = vec![
        env(
            &t,
            5,
            SyncEvent::SessionDeleted {
                session_id: "s".into(),
            },
        ),
        env(&t, 6, SyncEvent::SessionUpdated { info: session("s") }),
        env(&t, 7, SyncEvent::PartUpdated { part }),
    ];
    assert!(store.apply(&recreate).await.is_err());
    assert!(store
        .message(&t, &"s".into(), &"m1".into())
        .await
        .unwrap()
        .is_some());
    store.apply(&recreate[..2]).await.unwrap();
    assert!(store
        .message(&t, &"s".into(), &"m1".into())
        .await
        .unwrap()
        .is_none());
    let state = store.session(&t, &"s".into()).await.unwrap().unwrap();
    assert_eq!(state.seq, 6);
    // A message for a missing session, and an envelope naming another session.
    let missing = env(
        &t,
        8,
        SyncEvent::MessageUpdated {
            info: {
                let mut m = m2.clone();
                m.session_id = "nope".into();
                m
            },
        },
    );
    assert!(matches!(
        store.apply(&[missing]).await,
        Err(Error::NotFound {
            what: "session",
            ..
        })
    ));
    let mut crossed = env(&t, 9, SyncEvent::MessageUpdated { info: m2 });
    crossed.session_id = "other".into();
    assert!(matches!(
        store.apply(&[crossed]).await,
        Err(Error::InvalidInput(_))
    ));
}

#[tokio::test]
async fn bad_urls_are_invalid_input_and_unreachable_servers_retryable() {
    for url in ["http://x", "redis://h?maxlen=x", "redis://h?prefix=a*"] {
        let err = RedisStore::connect(url).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{url}: {err:?}");
    }
    let err = RedisStore::connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(std::error::Error::source(&err).is_some(), "source kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_deletes_every_key_of_the_prefix_and_nothing_else() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    // `…:c1` must not take `…:c10` (a prefix of its name) with it.
    let (one, ten) = (format!("{}:c1", p.prefix), format!("{}:c10", p.prefix));
    let t = TenantId::new("a").unwrap();
    let mut stores = Vec::new();
    for prefix in [&one, &ten] {
        let store = RedisStore::connect(&common::with_prefix(&p.server, prefix, ""))
            .await
            .unwrap();
        let (msg, part) = user_message(&"s".into(), "m", "p", "hello");
        store.apply(&opening(&t, "s", msg, part)).await.unwrap();
        stores.push(store);
    }
    let before = count_prefix(&p.server, &one);
    assert!(before > 0);
    assert_eq!(stores[0].clear().await.unwrap(), before);
    assert_eq!(count_prefix(&p.server, &one), 0);
    assert!(stores[0].sessions(&t).await.unwrap().is_empty());
    assert_eq!(
        stores[1].sessions(&t).await.unwrap().len(),
        1,
        "c10 was touched"
    );
    assert_eq!(stores[0].clear().await.unwrap(), 0);
}

#[tokio::test]
async fn a_session_written_before_the_part_index_gets_it_on_its_first_part_upsert() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = TenantId::new("a").unwrap();
    let s = forge_core::SessionId::from("ses_1");
    let (m1, part) = user_message(&s, "msg_1", "prt_1", "hello");
    let (m2, _) = user_message(&s, "msg_2", "prt_2", "");
    let mut batch = opening(&t, "ses_1", m1, part.clone());
    // A second message, between the first and its part.
    batch.insert(2, env(&t, 3, SyncEvent::MessageUpdated { info: m2 }));
    batch[3].seq = 4;
    store.apply(&batch).await.unwrap();
    // What a release before the part index wrote: no index, no mark.
    let base = store.keys().session_base(&t, &s);
    let mut conn = p.conn();
    redis::cmd("DEL")
        .arg(format!("{base}:pi"))
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("HDEL")
        .arg(format!("{base}:info"))
        .arg("pi")
        .query::<()>(&mut conn)
        .unwrap();
    let mut moved = part;
    moved.message_id = "msg_2".into();
    store
        .apply(&[env(
            &t,
            5,
            SyncEvent::PartUpdated {
                part: moved.clone(),
            },
        )])
        .await
        .unwrap();
    let first = store
        .message(&t, &s, &"msg_1".into())
        .await
        .unwrap()
        .unwrap();
    let second = store
        .message(&t, &s, &"msg_2".into())
        .await
        .unwrap()
        .unwrap();
    assert!(first.parts.is_empty(), "the part stayed: {:?}", first.parts);
    assert_eq!(second.parts, vec![moved]);
}

/// A prefix written before hash tags (flat keys `PREFIX:t:TENANT:…`, no layout
/// marker) keeps its key names and its data: the first connect finds the flat keys and
/// records layout 1; a new prefix gets layout 2 (hash-tagged); an unknown marker is
/// refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_flat_keys_keeps_its_layout_and_a_new_one_is_tagged() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let (prefix, url) = (&p.prefix, &p.url);
    let mut conn = p.conn();
    let marker = format!("{prefix}:layout");
    let t = TenantId::new("acme").unwrap();
    let s: forge_core::SessionId = "ses_1".into();
    let (msg, part) = user_message(&s, "msg_1", "prt_1", "kept");
    let batch = opening(&t, "ses_1", msg, part);
    {
        // Write flat keys (as an older release did), then forget the marker.
        redis::cmd("SET")
            .arg(&marker)
            .arg("1")
            .query::<()>(&mut conn)
            .unwrap();
        let old = RedisStore::connect(url).await.unwrap();
        assert_eq!(old.keys().layout(), forge_redis::KeyLayout::Flat);
        old.apply(&batch).await.unwrap();
        redis::cmd("DEL")
            .arg(&marker)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let flat: Vec<String> = redis::Commands::keys(&mut conn, format!("{prefix}:t:*")).unwrap();
    assert!(
        flat.iter()
            .all(|k| k.starts_with(&format!("{prefix}:t:acme:"))),
        "{flat:?}"
    );
    let store = RedisStore::connect(url).await.unwrap();
    assert_eq!(store.keys().layout(), forge_redis::KeyLayout::Flat);
    let m = store
        .message(&t, &s, &"msg_1".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(common::text_of(&m.parts[0]), Some("kept"));
    let recorded: String = redis::cmd("GET").arg(&marker).query(&mut conn).unwrap();
    assert_eq!(recorded, "1");

    let new = TestPrefix::on(p.server.clone(), "");
    let fresh = &new.prefix;
    let tagged = new.store().await;
    assert_eq!(tagged.keys().layout(), forge_redis::KeyLayout::Tagged);
    tagged.apply(&batch).await.unwrap();
    let keys: Vec<String> = redis::Commands::keys(&mut conn, format!("{fresh}:t:*")).unwrap();
    assert!(
        !keys.is_empty()
            && keys
                .iter()
                .all(|k| k.starts_with(&format!("{fresh}:t:{{acme}}:"))),
        "{keys:?}"
    );

    redis::cmd("SET")
        .arg(format!("{fresh}:layout"))
        .arg("9")
        .query::<()>(&mut conn)
        .unwrap();
    let err = RedisStore::connect(&new.url).await.unwrap_err();
    assert!(
        err.to_string().contains("layout") && err.to_string().contains("\"9\""),
        "{err}"
    );
}
