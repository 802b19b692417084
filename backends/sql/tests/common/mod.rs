//! Fixtures shared by the integration tests: the differential fixtures of
//! `forge_conformance::differential` (id pools, row builders, read comparison against
//! `MemoryStore`, random batches), plus the Postgres test-service switch and the
//! exact-values batch.

#![allow(dead_code, unused_imports)] // each test crate uses its own subset

pub mod concurrency;
pub mod scenarios;
pub mod w1;

pub use forge_conformance::differential::random as differential;
pub use forge_conformance::differential::*;

use forge_core::{Envelope, SyncEvent};
use serde_json::json;

/// A multi-threaded runtime, for tests where tasks must really run in parallel.
pub fn parallel_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Services

/// The Postgres server to test against: `FORGE_TEST_POSTGRES_URL`.
///
/// Unset, the test says loudly that it was skipped and returns `None` — unless
/// `FORGE_TEST_REQUIRE_SERVICES=1`, where a missing service is a failure. A set URL
/// whose server cannot be reached fails the test either way (when the test connects).
pub fn postgres_url(test: &str) -> Option<String> {
    forge_testkit::service_url("FORGE_TEST_POSTGRES_URL", test)
}

/// Floats whose shortest decimal form a fast float parser reads back one ulp off.
pub const HARD_FLOATS: [f64; 3] = [
    7.328_930_366_960_503_5,
    1.631_845_652_050_215_8e-21,
    2.109_087_688_342_284_4e-109,
];

/// Writes [`exact_values_batch`] with [`HARD_FLOATS`] and checks that the message and
/// the part read back exactly as written.
pub async fn assert_exact_values_read_back(store: &dyn forge_core::Store) {
    let (batch, msg, prt) = exact_values_batch(&HARD_FLOATS);
    store.apply(&batch).await.unwrap();
    let got = store
        .message(&tenant("a"), &"ses_\0nul".into(), &"msg_\0".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.info.as_assistant().unwrap().cost.to_bits(),
        HARD_FLOATS[0].to_bits()
    );
    assert_eq!(got.info, msg);
    assert_eq!(got.parts, vec![prt]);
}

/// A batch with hard floats, an unknown field, NULs in ids and text.
pub fn exact_values_batch(
    floats: &[f64; 3],
) -> (
    Vec<Envelope<SyncEvent>>,
    forge_core::Message,
    forge_core::Part,
) {
    let (s, m) = ("ses_\0nul", "msg_\0");
    let mut msg = message(s, m, 2);
    msg.as_assistant_mut().unwrap().cost = floats[0];
    let json = serde_json::to_value(part(s, m, "prt_1", 6)).unwrap();
    let mut json = json.as_object().unwrap().clone();
    json.insert("weight".into(), json!(floats[1]));
    json.insert("xNul".into(), json!("before\0after \u{10FFFF}"));
    json["state"]["metadata"] = json!({"score": floats[2], "zero": -0.0, "one": 1.0});
    let prt: forge_core::Part = serde_json::from_value(serde_json::Value::Object(json)).unwrap();
    let batch = vec![
        put_session("a", s, 1),
        env("a", s, 2, SyncEvent::MessageUpdated { info: msg.clone() }),
        env("a", s, 3, SyncEvent::PartUpdated { part: prt.clone() }),
    ];
    (batch, msg, prt)
}
