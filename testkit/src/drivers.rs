//! Checks of a driver's throwaway instances that every server backend's tests share.

use forge_core::driver::{Driver, DriverOptions, InstanceOptions};
use forge_core::{Envelope, MessageId, PartId, Session, SessionId, SyncEvent, TenantId};

use crate::fixtures::user_message_with;

/// An instance of `driver` on `server` opens by its [`url`](forge_core::driver::Instances::url)
/// from elsewhere: a store opened there (as another process would) reads what the
/// instance wrote, and nothing of it is left once the instance is torn down and its set
/// closed.
///
/// # Panics
/// When any of that does not hold.
pub async fn assert_instance_opens_by_url(driver: &dyn Driver, server: &str) {
    let set = driver
        .instances(server, &InstanceOptions::default().purpose("url"))
        .await
        .expect("instances");
    let store = set.fresh().await.expect("fresh").store;
    let tenant = TenantId::new("t_url").expect("tenant");
    let mut session = Session::new("opened by url", 1);
    session.id = SessionId::from("ses_url");
    let (msg, part) = user_message_with(
        &session.id,
        MessageId::from("msg_1"),
        PartId::from("prt_1"),
        "hello",
        2,
    );
    let batch: Vec<Envelope<SyncEvent>> = [
        SyncEvent::SessionUpdated {
            info: session.clone(),
        },
        SyncEvent::MessageUpdated { info: msg },
        SyncEvent::PartUpdated { part },
    ]
    .into_iter()
    .zip(1..)
    .map(|(event, seq)| Envelope {
        tenant: tenant.clone(),
        session_id: session.id.clone(),
        seq,
        epoch: None,
        event,
    })
    .collect();
    store.apply(&batch).await.expect("apply");

    let url = set
        .url(&store)
        .unwrap_or_else(|| panic!("a {} instance has a URL", driver.info().name));
    let other = driver
        .open_store(&url, &DriverOptions::default())
        .await
        .expect("open the instance by its URL");
    let seen = other.sessions(&tenant).await.expect("sessions");
    assert_eq!(seen.len(), 1, "{url} shows {seen:?}");
    assert_eq!(seen[0].info.id, session.id);
    assert!(
        set.url(&other).is_none(),
        "a store the set did not make has no URL"
    );

    set.teardown(store).await.expect("teardown");
    set.close().await.expect("close");
    // Gone: no session left, or (a dropped schema) nothing to read at all.
    if let Ok(left) = other.sessions(&tenant).await {
        assert!(left.is_empty(), "{url} still holds {left:?}");
    }
    let _ = other.close().await;
}
