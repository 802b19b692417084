//! Fencing on a real server: claims, leases, renewals and releases decided by the
//! claim script; stale batches refused by the apply script with nothing written; fence
//! records kept through `session.deleted` and a server kill; racing store handles;
//! epochs past 9 and up to the 2^53 the backend grants.

mod common;

use std::collections::BTreeSet;

use common::{env, opening, session, user_message, TestPrefix};
use forge_core::{
    Claim, ClaimMode, ClaimRequest, Envelope, Error, ErrorKind, SessionId, Store, SyncEvent,
    TenantId,
};
use forge_redis::RedisStore;
use forge_testkit::servers::{Redis, RedisStop};

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).expect("tenant id")
}

/// `batch` written under `epoch`.
fn under(epoch: Option<u64>, batch: &[Envelope<SyncEvent>]) -> Vec<Envelope<SyncEvent>> {
    batch.iter().map(|e| e.clone().with_epoch(epoch)).collect()
}

/// Session `id` opened with one message (`msg_1`) and its part: seqs 1 to 3.
fn open_session(t: &TenantId, id: &str) -> Vec<Envelope<SyncEvent>> {
    let (msg, part) = user_message(&id.into(), "msg_1", "prt_1", "hello");
    opening(t, id, msg, part)
}

/// A second message (`msg_2`) for session `id` at seq 4.
fn second_message(t: &TenantId, id: &str) -> Envelope<SyncEvent> {
    let (msg, _) = user_message(&id.into(), "msg_2", "prt_2", "again");
    env(t, 4, SyncEvent::MessageUpdated { info: msg })
}

async fn take_over(store: &RedisStore, t: &TenantId, s: &SessionId, holder: &str) -> Claim {
    let req = ClaimRequest::new(holder, 0).mode(ClaimMode::TakeOver);
    store.claim(t, s, &req).await.expect("take over")
}

fn assert_fenced(err: &Error, session: &str, epoch: Option<u64>, current: u64) {
    match err {
        Error::Fenced {
            session: s,
            epoch: e,
            current: c,
            ..
        } => assert_eq!(
            (s.as_str(), *e, *c),
            (session, epoch, current),
            "fenced for the wrong reason: {err}"
        ),
        other => panic!("expected Fenced for {session}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_grow_one_by_one_past_nine_and_compare_as_numbers() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = tenant("t");
    let s: SessionId = "ses_1".into();
    assert_eq!(store.claimed(&t, &s).await.expect("claimed"), None);
    for want in 1..=12 {
        let c = take_over(&store, &t, &s, &format!("w{want}")).await;
        assert_eq!(c.epoch, want);
        assert_eq!(store.claimed(&t, &s).await.expect("claimed"), Some(c));
    }
    // Epoch 12 is current: batches of 1, 2, 9 and 11 are refused, 12 lands. ("9" and
    // "12" or "1" and "12" would order the other way as strings.)
    let batch = open_session(&t, "ses_1");
    for stale in [1, 2, 9, 11, 13] {
        let err = store
            .apply(&under(Some(stale), &batch))
            .await
            .expect_err("a batch of another epoch");
        assert_fenced(&err, "ses_1", Some(stale), 12);
    }
    store
        .apply(&under(Some(12), &batch))
        .await
        .expect("the current epoch writes");
    // Renewals of 1, 9, 11 and 13 are refused; of 12 it keeps 12.
    let renew = |e| ClaimRequest::new("w12", 5).mode(ClaimMode::Renew(e));
    for stale in [1, 9, 11, 13] {
        let err = store
            .claim(&t, &s, &renew(stale))
            .await
            .expect_err("stale renewal");
        assert_fenced(&err, "ses_1", Some(stale), 12);
    }
    assert_eq!(
        store.claim(&t, &s, &renew(12)).await.expect("renew").epoch,
        12
    );

    // Large epochs are stored as integers, not as 1e+14.
    let big = "p-big";
    let mut conn = p.conn();
    let key = store.keys().fence(&t, &big.into());
    redis::cmd("HSET")
        .arg(&key)
        .arg(&["epoch", "99999999999999", "holder", "x", "expires", "0"])
        .query::<()>(&mut conn)
        .expect("HSET");
    let c = take_over(&store, &t, &big.into(), "y").await;
    assert_eq!(c.epoch, 100_000_000_000_000);
    let raw: String = redis::cmd("HGET")
        .arg(&key)
        .arg("epoch")
        .query(&mut conn)
        .expect("HGET");
    assert_eq!(raw, "100000000000000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_others_out_until_taken_over_renewed_or_released() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = tenant("t");
    let s: SessionId = "ses_1".into();
    let free = |holder: &str, now: i64| ClaimRequest::new(holder, now).lease_ms(100);

    let a1 = store
        .claim(&t, &s, &free("a", 1_000))
        .await
        .expect("first claim");
    assert_eq!(
        (a1.epoch, a1.holder.as_str(), a1.expires_ms),
        (1, "a", 1_100)
    );
    // b is kept out while a's lease runs; the error names a and its lease.
    let err = store
        .claim(&t, &s, &free("b", 1_099))
        .await
        .expect_err("held");
    assert_eq!(err.kind(), ErrorKind::Held, "{err}");
    match &err {
        Error::Held {
            session,
            holder,
            epoch,
            expires_ms,
        } => assert_eq!(
            (session.as_str(), holder.as_str(), *epoch, *expires_ms),
            ("ses_1", "a", 1, 1_100)
        ),
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(store.claimed(&t, &s).await.expect("claimed"), Some(a1));
    // The same holder claims again freely (a new epoch).
    let a2 = store
        .claim(&t, &s, &free("a", 1_050))
        .await
        .expect("same holder");
    assert_eq!((a2.epoch, a2.expires_ms), (2, 1_150));
    // Once the lease ran out (expires == now), b gets it.
    let b3 = store
        .claim(&t, &s, &free("b", 1_150))
        .await
        .expect("expired");
    assert_eq!((b3.epoch, b3.holder.as_str()), (3, "b"));
    // A take-over does not wait; the old holder's renewal is fenced, naming c.
    let c4 = store
        .claim(&t, &s, &free("c", 1_151).mode(ClaimMode::TakeOver))
        .await
        .expect("take over");
    assert_eq!(c4.epoch, 4);
    let err = store
        .claim(&t, &s, &free("b", 1_152).mode(ClaimMode::Renew(3)))
        .await
        .expect_err("fenced renewal");
    assert_fenced(&err, "ses_1", Some(3), 4);
    assert!(err.to_string().contains('c'), "{err}");
    // c renews: same epoch, longer lease.
    let renewed = store
        .claim(&t, &s, &free("c", 2_000).mode(ClaimMode::Renew(4)))
        .await
        .expect("renewal");
    assert_eq!((renewed.epoch, renewed.expires_ms), (4, 2_100));
    // Releasing a stale epoch changes nothing; the current one ends the lease only.
    store.release(&t, &s, 3).await.expect("stale release");
    assert_eq!(store.claimed(&t, &s).await.expect("claimed"), Some(renewed));
    store.release(&t, &s, 4).await.expect("release");
    let released = store
        .claimed(&t, &s)
        .await
        .expect("claimed")
        .expect("record");
    assert_eq!((released.epoch, released.expires_ms), (4, 0));
    let d5 = store
        .claim(&t, &s, &free("d", 1_500))
        .await
        .expect("after release");
    assert_eq!(d5.epoch, 5);
    // Releasing a session never claimed is not an error and creates nothing.
    let never: SessionId = "ses_never".into();
    store
        .release(&t, &never, 1)
        .await
        .expect("release of nothing");
    assert_eq!(store.claimed(&t, &never).await.expect("claimed"), None);
    // A bad request is refused before anything is written.
    let err = store
        .claim(&t, &never, &ClaimRequest::new("", 0))
        .await
        .expect_err("empty holder");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let err = store
        .claim(
            &t,
            &never,
            &ClaimRequest::new("a", 0).mode(ClaimMode::Renew(0)),
        )
        .await
        .expect_err("renew 0");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(store.claimed(&t, &never).await.expect("claimed"), None);
    // A renewal of a session never claimed is fenced.
    let err = store
        .claim(&t, &never, &free("a", 0).mode(ClaimMode::Renew(1)))
        .await
        .expect_err("renew nothing");
    assert_fenced(&err, "ses_never", Some(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_batch_is_refused_and_writes_nothing() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = tenant("t");
    let s: SessionId = "ses_1".into();
    // An unfenced writer writes a session never claimed.
    store
        .apply(&open_session(&t, "ses_free"))
        .await
        .expect("unfenced write of an unclaimed session");
    let e1 = take_over(&store, &t, &s, "a").await.epoch;
    store
        .apply(&under(Some(e1), &open_session(&t, "ses_1")))
        .await
        .expect("the holder writes");
    let e2 = take_over(&store, &t, &s, "b").await.epoch;
    assert_eq!(e2, e1 + 1);

    let before = |store: &RedisStore| {
        let store = store.clone();
        let t = t.clone();
        async move {
            (
                store.sessions(&t).await.expect("sessions"),
                store.open_items(&t, None).await.expect("open items"),
                forge_core::read_all(&store, &t, &"ses_1".into(), 10)
                    .await
                    .expect("messages"),
            )
        }
    };
    let snapshot = before(&store).await;
    // The old holder's batch: refused, naming the session, its epoch and b.
    let stale = under(Some(e1), &[second_message(&t, "ses_1")]);
    let err = store.apply(&stale).await.expect_err("stale epoch");
    assert_fenced(&err, "ses_1", Some(e1), e2);
    assert!(err.to_string().contains('b'), "{err}");
    // Unfenced on a claimed session; an epoch on a session never claimed.
    let err = store
        .apply(&[second_message(&t, "ses_1")])
        .await
        .expect_err("unfenced write of a claimed session");
    assert_fenced(&err, "ses_1", None, e2);
    let err = store
        .apply(&under(Some(1), &[second_message(&t, "ses_free")]))
        .await
        .expect_err("epoch on an unclaimed session");
    assert_fenced(&err, "ses_free", Some(1), 0);
    // A batch whose first sessions are fine and whose last event is stale writes
    // nothing at all: not the new session, not the fine message.
    let mut mixed = open_session(&t, "ses_new");
    mixed.push(second_message(&t, "ses_free"));
    mixed.extend(under(Some(e1), &[second_message(&t, "ses_1")]));
    let err = store.apply(&mixed).await.expect_err("mixed batch");
    assert_fenced(&err, "ses_1", Some(e1), e2);
    // Events of one session under two epochs: the stale one fails the batch.
    let mut two = under(Some(e2), &[second_message(&t, "ses_1")]);
    two.extend(under(Some(e1), &[second_message(&t, "ses_1")]));
    let err = store.apply(&two).await.expect_err("two epochs");
    assert_fenced(&err, "ses_1", Some(e1), e2);
    assert_eq!(
        before(&store).await,
        snapshot,
        "a refused batch wrote something"
    );
    assert!(store
        .session(&t, &"ses_new".into())
        .await
        .expect("session")
        .is_none());
    // The new holder writes.
    store
        .apply(&under(Some(e2), &[second_message(&t, "ses_1")]))
        .await
        .expect("current epoch");
    let state = store
        .session(&t, &s)
        .await
        .expect("session")
        .expect("ses_1");
    assert_eq!(state.seq, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_record_survives_session_deleted_and_stays_in_its_tenant() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let (t, other) = (tenant("t"), tenant("u"));
    let s: SessionId = "ses_1".into();
    let e = take_over(&store, &t, &s, "a").await.epoch;
    store
        .apply(&under(Some(e), &open_session(&t, "ses_1")))
        .await
        .expect("write");
    let deleted = env(
        &t,
        5,
        SyncEvent::SessionDeleted {
            session_id: s.clone(),
        },
    );
    store
        .apply(&under(Some(e), &[deleted]))
        .await
        .expect("delete");
    assert!(store.session(&t, &s).await.expect("session").is_none());
    let kept = store
        .claimed(&t, &s)
        .await
        .expect("claimed")
        .expect("record kept");
    assert_eq!((kept.epoch, kept.holder.as_str()), (e, "a"));
    assert_eq!(take_over(&store, &t, &s, "b").await.epoch, e + 1);
    // An unfenced writer cannot re-create the deleted session.
    let err = store
        .apply(&[env(
            &t,
            6,
            SyncEvent::SessionUpdated {
                info: session("ses_1"),
            },
        )])
        .await
        .expect_err("unfenced re-creation");
    assert_fenced(&err, "ses_1", None, e + 1);
    // The same session id in another tenant was never claimed.
    assert_eq!(store.claimed(&other, &s).await.expect("claimed"), None);
    store
        .apply(&open_session(&other, "ses_1"))
        .await
        .expect("unfenced write in another tenant");
    assert_eq!(take_over(&store, &other, &s, "c").await.epoch, 1);
    // A session may be claimed before it exists.
    let fresh: SessionId = "ses_later".into();
    let e = take_over(&store, &t, &fresh, "a").await.epoch;
    store
        .apply(&under(Some(e), &open_session(&t, "ses_later")))
        .await
        .expect("create under a claim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_store_handles_get_distinct_epochs_and_the_loser_is_fenced() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    // Two stores with connections of their own, as two processes would have.
    let (a, b) = (p.store().await, p.store().await);
    let t = tenant("t");
    let s: SessionId = "ses_race".into();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (t, s) = (t.clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            let req = ClaimRequest::new(format!("w{i}"), 0).mode(ClaimMode::TakeOver);
            store.claim(&t, &s, &req).await.map(|c| c.epoch)
        }));
    }
    let mut epochs = BTreeSet::new();
    for task in tasks {
        let epoch = task.await.expect("task").expect("claim");
        assert!(epochs.insert(epoch), "epoch {epoch} granted twice");
    }
    assert_eq!(epochs, (1..=40).collect::<BTreeSet<u64>>());
    // a claims, then b takes over: a's batch is refused, b's lands.
    let ea = take_over(&a, &t, &s, "a").await.epoch;
    let eb = take_over(&b, &t, &s, "b").await.epoch;
    assert_eq!((ea, eb), (41, 42));
    let batch = open_session(&t, "ses_race");
    let err = a
        .apply(&under(Some(ea), &batch))
        .await
        .expect_err("a is fenced");
    assert_fenced(&err, "ses_race", Some(ea), eb);
    b.apply(&under(Some(eb), &batch)).await.expect("b writes");
    assert_eq!(
        a.session(&t, &s)
            .await
            .expect("session")
            .expect("ses_race")
            .seq,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_epoch_is_two_to_the_53_and_unreadable_records_are_corrupted() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = tenant("t");
    let s: SessionId = "ses_max".into();
    let max: u64 = 1 << 53;
    let key = store.keys().fence(&t, &s);
    let mut conn = p.conn();
    let set = |conn: &mut redis::Connection, fields: &[&str]| {
        redis::cmd("DEL").arg(&key).query::<()>(conn).expect("DEL");
        redis::cmd("HSET")
            .arg(&key)
            .arg(fields)
            .query::<()>(conn)
            .expect("HSET");
    };
    set(
        &mut conn,
        &[
            "epoch",
            &(max - 1).to_string(),
            "holder",
            "x",
            "expires",
            "0",
        ],
    );
    assert_eq!(take_over(&store, &t, &s, "y").await.epoch, max);
    let err = store
        .claim(&t, &s, &ClaimRequest::new("z", 0).mode(ClaimMode::TakeOver))
        .await
        .expect_err("no epoch after 2^53");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("every epoch"), "{err}");
    // 2^53 + 1 is a double's neighbour of 2^53, yet never matches it.
    let renew = ClaimRequest::new("y", 0).mode(ClaimMode::Renew(max + 1));
    let err = store.claim(&t, &s, &renew).await.expect_err("renew 2^53+1");
    assert_fenced(&err, "ses_max", Some(max + 1), max);
    let batch = open_session(&t, "ses_max");
    let err = store
        .apply(&under(Some(max + 1), &batch))
        .await
        .expect_err("batch of 2^53+1");
    assert_fenced(&err, "ses_max", Some(max + 1), max);
    store
        .apply(&under(Some(max), &batch))
        .await
        .expect("batch of 2^53");

    // A record changed behind the store's back is never read as a claim.
    set(
        &mut conn,
        &["epoch", "seven", "holder", "x", "expires", "0"],
    );
    let err = store
        .claim(&t, &s, &ClaimRequest::new("z", 0))
        .await
        .expect_err("corrupt record");
    assert_eq!(err.kind(), ErrorKind::Corrupted, "{err}");
    assert!(err.to_string().contains(&key), "{err}");
    let err = store.claimed(&t, &s).await.expect_err("corrupt record");
    assert_eq!(err.kind(), ErrorKind::Corrupted, "{err}");
    let err = store
        .apply(&under(Some(7), &[second_message(&t, "ses_max")]))
        .await
        .expect_err("corrupt record in apply");
    assert_eq!(err.kind(), ErrorKind::Corrupted, "{err}");
}

#[test]
fn a_claim_survives_a_server_kill() {
    let test = "a_claim_survives_a_server_kill";
    let Some(mut server) = Redis::start(6386, "always", test) else {
        return;
    };
    let rt = forge_testkit::current_thread_runtime();
    let url = format!("{}?prefix=fence", server.url());
    let t = tenant("t");
    let s: SessionId = "ses_1".into();
    let granted = rt.block_on(async {
        let store = RedisStore::connect(&url).await.expect("store");
        for holder in ["a", "b", "c"] {
            take_over(&store, &t, &s, holder).await;
        }
        let req = ClaimRequest::new("d", 1_000).mode(ClaimMode::TakeOver);
        store.claim(&t, &s, &req).await.expect("claim")
    });
    assert_eq!(granted.epoch, 4);
    // SIGKILL right after the claim returned: it was on disk before the answer.
    server.stop(RedisStop::Kill);
    server.start_again();
    rt.block_on(async {
        let store = RedisStore::connect(&url)
            .await
            .expect("store after restart");
        assert_eq!(
            store.claimed(&t, &s).await.expect("claimed"),
            Some(granted),
            "the claim was lost with the server"
        );
        assert_eq!(take_over(&store, &t, &s, "e").await.epoch, 5);
    });
}
