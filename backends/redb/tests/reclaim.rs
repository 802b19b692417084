//! `Store::reclaim` on redb: the journal is checkpointed and the file compacted, while
//! readers read; the file shrinks and nothing kept changes.

use std::sync::Arc;

use forge_core::Store;
use forge_redb::RedbStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_shrinks_the_file_and_keeps_every_kept_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reclaim.redb");
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
    let r = forge_testkit::stores::assert_reclaim_keeps_what_is_stored(Arc::clone(&store)).await;
    assert_eq!(r.reclaimed.action, "compacted", "{r:?}");
    // A tenth of the sessions kept: the database file is a fraction of what it was (the
    // journal keeps its size: it is recycled, never truncated).
    let (full, after) = r.item("reclaim.redb");
    assert!(
        after * 3 < full,
        "the file went from {full} to {after} bytes"
    );
    // Nothing left to give back the second time.
    let again = store.reclaim().await.unwrap();
    assert_eq!(again.bytes, 0, "{again:?} after {r:?}");
    store.close().await.unwrap();
}
