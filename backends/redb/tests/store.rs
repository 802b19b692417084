//! `RedbStore` against real redb files in temporary directories: equal to `MemoryStore`
//! for random batches, atomic per batch, paging exactly once while appending, safe under
//! concurrent writers, and exact for JSON numbers.

mod common;

use std::sync::Arc;

use common::*;
use forge_core::{Cursor, Store};
use forge_redb::{Durability, RedbOptions};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// 1. Differential: RedbStore equals MemoryStore

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn random_batches_leave_redb_equal_to_the_memory_reference(
        batches in differential::batches()
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions::default());
        rt.block_on(differential::run(&db, &batches))?;
    }
}

// ---------------------------------------------------------------------------------------
// 3. Atomicity

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    let rt = runtime();
    let (_dir, path) = temp_path();
    on_file(&rt, &path, async |store| {
        stores::assert_failing_batches_leave_nothing(store, || ()).await;
    });
    // Nothing of the failed batches reached the file either.
    on_file(&rt, &path, async |store| {
        stores::assert_holds_atomicity_base(store).await;
    });
}

// ---------------------------------------------------------------------------------------
// 5. Paging while appending

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn paging_yields_every_message_exactly_once_while_appending(
        initial in 0..40usize,
        limit in 1..8usize,
        appends_per_page in 0..4usize,
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions {
            durability: Durability::None,
            ..RedbOptions::default()
        });
        rt.block_on(stores::assert_paging_while_appending(
            &db,
            initial,
            limit,
            appends_per_page,
        ));
    }
}

#[test]
fn a_cursor_below_every_id_gives_an_empty_last_page() {
    let rt = runtime();
    let (_dir, db) = temp_store(RedbOptions::default());
    rt.block_on(async {
        apply_all(&db, &sample_history()).await;
        let page = db
            .messages(
                &tenant("a"),
                &"ses_1".into(),
                Some(&Cursor::before("".into())),
                10,
            )
            .await
            .unwrap();
        assert!(page.messages.is_empty() && page.next.is_none(), "{page:?}");
        // And an unknown session is an empty page.
        let page = db
            .messages(&tenant("a"), &"ses_404".into(), None, 10)
            .await
            .unwrap();
        assert!(page.messages.is_empty() && page.next.is_none());
    });
}

// ---------------------------------------------------------------------------------------
// Capabilities and concurrency

#[test]
fn capabilities_follow_the_durability_option() {
    let (_d1, durable) = temp_store(RedbOptions::default());
    stores::assert_durable_capabilities(&durable, "redb", forge_core::Tenancy::Keyed);
    let (_d2, fast) = temp_store(RedbOptions {
        durability: Durability::None,
        ..RedbOptions::default()
    });
    assert!(!fast.capabilities().durable);
}

#[test]
fn concurrent_writers_lose_no_update() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let (_dir, db) = temp_store(RedbOptions {
        durability: Durability::None,
        ..RedbOptions::default()
    });
    rt.block_on(stores::hammer(&[Arc::new(db)], 8, 25, false));
}

/// Floats, an unknown field and NULs in ids and text read back exactly: the crate
/// enables serde_json's `float_roundtrip`, so rows read back bit for bit.
#[test]
fn json_numbers_read_back_bit_for_bit() {
    let (_dir, db) = temp_store(RedbOptions::default());
    runtime().block_on(stores::assert_exact_values_read_back(&db));
}
