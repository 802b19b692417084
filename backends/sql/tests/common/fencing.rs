//! Fencing checks shared by the SQLite and Postgres tests: the claim rules as a store
//! keeps them, stale batches refused whole, records apart from the sessions, and two
//! store handles on one database racing.

use std::sync::Arc;

use forge_core::fence::DEFAULT_LEASE_MS;
use forge_core::{Claim, ClaimMode, ClaimRequest, Envelope, Error, SessionId, Store, SyncEvent};

use super::*;

/// The claimers' clock in these tests, Unix ms.
pub const NOW: i64 = 1_700_000_000_000;

/// `batch` written under `epoch`.
pub fn under(epoch: Option<u64>, batch: Vec<Envelope<SyncEvent>>) -> Vec<Envelope<SyncEvent>> {
    batch.into_iter().map(|e| e.with_epoch(epoch)).collect()
}

/// Takes `session` of tenant `t` over for `holder`: the new claim's epoch.
pub async fn take_over(store: &dyn Store, t: &str, session: &str, holder: &str) -> u64 {
    let req = ClaimRequest::new(holder, NOW).mode(ClaimMode::TakeOver);
    store
        .claim(&tenant(t), &session.into(), &req)
        .await
        .unwrap()
        .epoch
}

/// `err` is a [`Error::Fenced`] of `session` for a write with `epoch` over `current`.
pub fn assert_fenced(err: &Error, session: &str, epoch: Option<u64>, current: u64) {
    assert!(
        matches!(err, Error::Fenced { session: s, epoch: e, current: c, .. }
            if s == session && *e == epoch && *c == current),
        "expected Fenced({session}, {epoch:?} over {current}), got {err:?}"
    );
}

/// Epochs grow 1, 2, 3… past 9; a running lease keeps others out but not its holder;
/// take-over, renewal and release; records are per tenant.
pub async fn assert_claim_rules(store: &dyn Store) {
    let (a, s) = (tenant("a"), SessionId::from("ses_rules"));
    assert_eq!(store.claimed(&a, &s).await.unwrap(), None);
    let first = store
        .claim(&a, &s, &ClaimRequest::new("w1", NOW))
        .await
        .unwrap();
    let want = Claim {
        epoch: 1,
        holder: "w1".into(),
        expires_ms: NOW + DEFAULT_LEASE_MS,
    };
    assert_eq!(first, want);
    assert_eq!(store.claimed(&a, &s).await.unwrap(), Some(want));

    // Another holder is kept out while the lease runs, and told who holds it.
    let err = store
        .claim(&a, &s, &ClaimRequest::new("w2", NOW + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Held { holder, epoch: 1, expires_ms, .. }
            if holder == "w1" && *expires_ms == NOW + DEFAULT_LEASE_MS),
        "{err:?}"
    );
    // The holder itself claims again freely: a new epoch.
    let again = store
        .claim(&a, &s, &ClaimRequest::new("w1", NOW + 2))
        .await
        .unwrap();
    assert_eq!(again.epoch, 2);

    // Take-overs: one more each time, past 9 (10 after 9, not "10" before "9").
    for want in 3..=12 {
        assert_eq!(take_over(store, "a", "ses_rules", "w2").await, want);
    }

    // A renewal keeps the epoch and moves the lease; a stale one is fenced.
    let renew = ClaimRequest::new("w2", NOW + 10)
        .mode(ClaimMode::Renew(12))
        .lease_ms(5);
    let renewed = store.claim(&a, &s, &renew).await.unwrap();
    assert_eq!((renewed.epoch, renewed.expires_ms), (12, NOW + 15));
    let stale = ClaimRequest::new("w2", NOW).mode(ClaimMode::Renew(11));
    let err = store.claim(&a, &s, &stale).await.unwrap_err();
    assert_fenced(&err, "ses_rules", Some(11), 12);
    assert_eq!(store.claimed(&a, &s).await.unwrap(), Some(renewed.clone()));

    // Releasing a stale epoch changes nothing; releasing the current one ends the
    // lease and keeps the epoch, so the next claimer need not wait.
    store.release(&a, &s, 11).await.unwrap();
    assert_eq!(store.claimed(&a, &s).await.unwrap(), Some(renewed));
    store.release(&a, &s, 12).await.unwrap();
    let released = store.claimed(&a, &s).await.unwrap().unwrap();
    assert_eq!((released.epoch, released.expires_ms), (12, 0));
    let next = store
        .claim(&a, &s, &ClaimRequest::new("w3", NOW))
        .await
        .unwrap();
    assert_eq!(next.epoch, 13);
    // Releasing a session never claimed is no error and creates nothing.
    let never = SessionId::from("ses_never");
    store.release(&a, &never, 1).await.unwrap();
    assert_eq!(store.claimed(&a, &never).await.unwrap(), None);

    // Records are per tenant: tenant b sees none, and its own claim starts at 1.
    let b = tenant("b");
    assert_eq!(store.claimed(&b, &s).await.unwrap(), None);
    let other = store
        .claim(&b, &s, &ClaimRequest::new("w9", NOW))
        .await
        .unwrap();
    assert_eq!(other.epoch, 1);
    assert_eq!(store.claimed(&a, &s).await.unwrap().unwrap().epoch, 13);

    // A bad request is refused and stores nothing.
    let err = store
        .claim(&a, &never, &ClaimRequest::new("", NOW))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(store.claimed(&a, &never).await.unwrap(), None);
}

/// The message ids of session `s` of tenant `t`, sorted.
async fn message_ids(store: &dyn Store, t: &str, s: &str) -> Vec<String> {
    let page = store
        .messages(&tenant(t), &s.into(), None, 1000)
        .await
        .unwrap();
    let mut ids: Vec<String> = page
        .messages
        .iter()
        .map(|m| m.info.id.as_str().to_owned())
        .collect();
    ids.sort();
    ids
}

/// A batch is applied only under its session's current epoch; a refused batch writes
/// nothing, not even its events for other sessions.
pub async fn assert_stale_batches_are_refused(store: &dyn Store) {
    let (t, s) = ("a", "ses_stale");
    // Never claimed: an unfenced writer writes.
    store.apply(&[put_session(t, s, 1)]).await.unwrap();
    let mut epoch = 0;
    for _ in 0..9 {
        epoch = take_over(store, t, s, "w1").await;
    }
    assert_eq!(epoch, 9);
    store
        .apply(&under(Some(9), vec![put_message(t, s, "msg_9", 0, 2)]))
        .await
        .unwrap();
    let before = store.session(&tenant(t), &s.into()).await.unwrap();

    assert_eq!(take_over(store, t, s, "w2").await, 10);
    for (stale, current) in [(Some(9), 10), (Some(11), 10), (Some(1), 10), (None, 10)] {
        // The first event is of another session, never claimed and written unfenced:
        // it is refused with the batch.
        let mut batch = vec![put_session(t, "ses_bystander", 1)];
        batch.extend(under(
            stale,
            vec![put_message(t, s, "msg_stale", 0, 3), put_session(t, s, 4)],
        ));
        let err = store.apply(&batch).await.unwrap_err();
        assert_fenced(&err, s, stale, current);
    }
    assert_eq!(store.session(&tenant(t), &s.into()).await.unwrap(), before);
    assert_eq!(message_ids(store, t, s).await, ["msg_9"]);
    assert_eq!(
        store
            .session(&tenant(t), &"ses_bystander".into())
            .await
            .unwrap(),
        None
    );

    // The current epoch writes; so does an unfenced writer on another session.
    store
        .apply(&under(Some(10), vec![put_message(t, s, "msg_10", 0, 5)]))
        .await
        .unwrap();
    store
        .apply(&[put_session(t, "ses_bystander", 1)])
        .await
        .unwrap();
    assert_eq!(message_ids(store, t, s).await, ["msg_10", "msg_9"]);

    // A session claimed before it exists is written under its epoch only.
    let fresh = "ses_claimed_first";
    assert_eq!(take_over(store, t, fresh, "w3").await, 1);
    let err = store.apply(&[put_session(t, fresh, 1)]).await.unwrap_err();
    assert_fenced(&err, fresh, None, 1);
    store
        .apply(&under(Some(1), vec![put_session(t, fresh, 1)]))
        .await
        .unwrap();
}

/// Claims `ses_deleted` (epoch 3), writes it and deletes it under its epoch: the record
/// stays. Returns the session's id.
pub async fn claim_write_and_delete(store: &dyn Store) -> SessionId {
    let (t, s) = ("a", "ses_deleted");
    for _ in 0..3 {
        take_over(store, t, s, "w").await;
    }
    let delete = env(
        t,
        s,
        3,
        SyncEvent::SessionDeleted {
            session_id: s.into(),
        },
    );
    store
        .apply(&under(
            Some(3),
            vec![
                put_session(t, s, 1),
                put_message(t, s, "msg_1", 0, 2),
                delete,
            ],
        ))
        .await
        .unwrap();
    assert_eq!(store.session(&tenant(t), &s.into()).await.unwrap(), None);
    assert_eq!(
        store
            .claimed(&tenant(t), &s.into())
            .await
            .unwrap()
            .map(|c| c.epoch),
        Some(3)
    );
    s.into()
}

/// After [`claim_write_and_delete`], on a store reopened on the same database: the
/// record is still there and epochs go on from it.
pub async fn assert_deleted_session_keeps_its_record(store: &dyn Store, s: &SessionId) {
    let claim = store.claimed(&tenant("a"), s).await.unwrap().unwrap();
    assert_eq!((claim.epoch, claim.holder.as_str()), (3, "w"));
    let err = store
        .apply(&[put_session("a", s.as_str(), 1)])
        .await
        .unwrap_err();
    assert_fenced(&err, s.as_str(), None, 3);
    assert_eq!(take_over(store, "a", s.as_str(), "w").await, 4);
}

/// Two handles on one database (standing for two processes): concurrent claims get
/// distinct epochs, each one more than the last; a handle whose claim was taken over has
/// its batches refused, also while it keeps writing as the take-over happens.
pub async fn assert_handles_race(one: Arc<dyn Store>, two: Arc<dyn Store>) {
    let handles = [one, two];
    let (t, s) = ("a", "ses_race");
    let claims = 24;
    let mut tasks = Vec::new();
    for i in 0..claims {
        let store = Arc::clone(&handles[i % 2]);
        tasks.push(tokio::spawn(async move {
            let holder = format!("writer_{i}");
            let epoch = take_over(store.as_ref(), t, s, &holder).await;
            (epoch, holder)
        }));
    }
    let mut granted = Vec::new();
    for task in tasks {
        granted.push(task.await.unwrap());
    }
    granted.sort();
    let epochs: Vec<u64> = granted.iter().map(|(e, _)| *e).collect();
    assert_eq!(epochs, (1..=claims as u64).collect::<Vec<_>>());
    let last = handles[0]
        .claimed(&tenant(t), &s.into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (last.epoch, &last.holder),
        (granted[claims - 1].0, &granted[claims - 1].1)
    );

    // Handle one writes under its claim, batch after batch, while handle two takes the
    // session over: every batch one starts after the take-over returned is refused, and
    // exactly the batches reported written are there.
    let (t, s) = ("a", "ses_stale_handle");
    let mine = take_over(handles[0].as_ref(), t, s, "one").await;
    handles[0]
        .apply(&under(Some(mine), vec![put_session(t, s, 1)]))
        .await
        .unwrap();
    let taken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, taken) = (Arc::clone(&handles[0]), Arc::clone(&taken));
        tokio::spawn(async move {
            let mut written = Vec::new();
            for seq in 2..400u64 {
                let after_take_over = taken.load(std::sync::atomic::Ordering::SeqCst);
                let id = format!("msg_{seq:04}");
                let batch = under(Some(mine), vec![put_message(t, s, &id, 0, seq)]);
                match store.apply(&batch).await {
                    Ok(()) => {
                        assert!(!after_take_over, "{id} written after the take-over");
                        written.push(id);
                    }
                    Err(e) => {
                        assert_fenced(&e, s, Some(mine), mine + 1);
                        return written;
                    }
                }
            }
            panic!("the take-over never fenced the writer");
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let theirs = take_over(handles[1].as_ref(), t, s, "two").await;
    taken.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(theirs, mine + 1);
    let written = writer.await.unwrap();
    assert!(
        !written.is_empty(),
        "the writer wrote nothing before the take-over"
    );
    assert_eq!(message_ids(handles[1].as_ref(), t, s).await, written);
    // The new holder writes; the old one stays out.
    handles[1]
        .apply(&under(
            Some(theirs),
            vec![put_message(t, s, "msg_new", 0, 500)],
        ))
        .await
        .unwrap();
    let err = handles[0]
        .apply(&under(
            Some(mine),
            vec![put_message(t, s, "msg_old", 0, 501)],
        ))
        .await
        .unwrap_err();
    assert_fenced(&err, s, Some(mine), theirs);
}
