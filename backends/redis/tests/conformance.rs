//! The conformance suite on RedisStore + RedisBus, through the driver like every other
//! backend: a fresh key prefix per case (the driver's throwaway instance), deleted at
//! its teardown, and reopened as new clients on the same prefix (the Streams bus
//! outlives the restart). Beside it, a check the suite's factory has no hook for: the
//! instances leave no key behind (cluster.rs checks it, on every node, over the whole
//! suite).

mod common;

use common::{bus_event, delta, opening, user_message, TestPrefix};
use forge_conformance::{BackendFactory, DriverFactory};
use forge_core::{Bus, SessionId, Store, TenantId};

forge_conformance::conformance_tests!(match common::redis_url() {
    Some(url) => DriverFactory::of(&forge_redis::DRIVER, url),
    None => return,
});

/// Writes a session through `store` and publishes its events and a delta on `bus`.
async fn write(store: &dyn Store, bus: &dyn Bus, tenant: &TenantId, session: &str) {
    let (msg, part) = user_message(&session.into(), "msg_1", "prt_1", "hello");
    let batch = opening(tenant, session, msg, part);
    store.apply(&batch).await.expect("apply");
    for env in &batch {
        bus.publish(bus_event(env)).expect("publish");
    }
    bus.publish(delta(tenant, &SessionId::from(session), 4))
        .expect("publish");
    bus.flush().await.expect("flush");
}

/// What the suite does with the factory's instances — stores and their buses written
/// to, reopened, the bus reopened with the store — leaves no key under the URL's prefix
/// once every instance is torn down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_instances_leave_no_key_behind_after_teardown() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let factory = DriverFactory::of(&forge_redis::DRIVER, p.url.clone());
    let tenant = TenantId::new("t1").unwrap();
    let mut stores = Vec::new();
    for case in ["ses_a", "ses_b"] {
        let store = factory.store().await.expect("store");
        let bus = factory.bus().await.expect("bus").expect("a bus of its own");
        write(store.as_ref(), bus.as_ref(), &tenant, case).await;
        drop(bus);
        let store = factory.reopen(store).await.expect("reopen").expect("kept");
        let bus = factory
            .reopen_bus(&store)
            .await
            .expect("bus")
            .expect("kept");
        assert_eq!(bus.last_seq(&tenant, &case.into()).await.unwrap(), Some(4));
        write(store.as_ref(), bus.as_ref(), &tenant, "ses_again").await;
        stores.push((store, bus));
    }
    assert!(p.left() > 0, "the instances wrote under {}", p.prefix);
    for (store, bus) in stores {
        factory.teardown(store).await.expect("teardown");
        drop(bus);
    }
    drop(factory);
    assert_eq!(p.left(), 0, "keys left under {} after teardown", p.prefix);
}

/// An instance opens by its URL (its key prefix) from another client, and its keys are
/// gone after teardown.
#[tokio::test]
async fn an_instance_opens_by_its_url() {
    let Some(server) = common::redis_url() else {
        return;
    };
    forge_testkit::drivers::assert_instance_opens_by_url(&forge_redis::DRIVER, &server).await;
}
