//! Damaged redb files: an empty file is refused, a cut file is not opened as an empty
//! store, and bytes flipped anywhere in a real file never make a read panic or return a
//! row's content changed — redb's own panics on damaged pages come back as
//! `Error::Corrupted`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use forge_core::{Error, Store};
use forge_redb::RedbStore;

/// A file with the sample history, closed cleanly (checkpointed: complete by itself).
fn written(path: &Path) {
    let rt = runtime();
    rt.block_on(async {
        let store = RedbStore::open(path).unwrap();
        for batch in sample_history() {
            store.apply(&batch).await.unwrap();
        }
        store.close().await.unwrap();
    });
    std::fs::remove_file(path.with_file_name("forge.redb-journal")).ok();
}

/// Every message row of every session of tenant `a`, as JSON by id.
async fn rows(store: &RedbStore) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    let tenant = tenant("a");
    for s in store.sessions(&tenant).await? {
        let page = store
            .messages(&tenant, &s.info.id, None, usize::MAX)
            .await?;
        for m in page.messages {
            out.insert(
                m.info.id.to_string(),
                serde_json::to_string(&m).unwrap_or_default(),
            );
        }
    }
    Ok(out)
}

#[test]
fn an_empty_file_is_refused_not_opened_as_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    std::fs::write(&path, b"").unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
    assert!(err.to_string().contains("empty file"), "{err}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "the file was written to"
    );
}

#[test]
fn a_cut_file_is_not_opened_as_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    written(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    for keep in [len / 2, 4096, 512] {
        let copy = dir.path().join("cut.redb");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&copy, &bytes[..usize::try_from(keep).unwrap()]).unwrap();
        match RedbStore::open(&copy) {
            Err(e) => {
                eprintln!("cut to {keep} of {len} bytes: {e}");
                assert!(matches!(e, Error::Corrupted { .. }), "{e:?}");
                assert!(e.to_string().contains("truncated"), "{e}");
            }
            Ok(store) => {
                let rt = runtime();
                let got = rt.block_on(rows(&store));
                assert!(
                    got.as_ref().map_or(true, |r| !r.is_empty()),
                    "cut to {keep} of {len} bytes opened as an empty store"
                );
            }
        }
        std::fs::remove_file(&copy).unwrap();
        std::fs::remove_file(copy.with_file_name("cut.redb-journal")).ok();
    }
}

/// Flips per run; most land in the file's unused space (redb preallocates).
const FLIPS: usize = 600;

#[test]
fn flipped_bytes_never_panic_and_never_change_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    written(&path);
    let original = std::fs::read(&path).unwrap();
    let rt = runtime();
    let intact = rt.block_on(async { rows(&RedbStore::open(&path).unwrap()).await.unwrap() });
    assert!(!intact.is_empty());
    // Positions spread over the whole file (a fixed sequence: the run is reproducible).
    let (mut same, mut errors, mut missing, mut foreign) = (0, 0, 0, 0);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..FLIPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = usize::try_from(x % original.len() as u64).unwrap();
        let mut bytes = original.clone();
        bytes[at] ^= 1 << (x % 8);
        let copy = dir.path().join("flipped.redb");
        std::fs::write(&copy, &bytes).unwrap();
        let got = match RedbStore::open(&copy) {
            Err(_) => Err(()),
            Ok(store) => rt.block_on(rows(&store)).map_err(drop),
        };
        match got {
            Err(()) => errors += 1,
            Ok(rows) if rows == intact => same += 1,
            Ok(rows) => {
                for (id, json) in &rows {
                    match intact.get(id) {
                        Some(orig) => assert_eq!(json, orig, "byte {at}: row {id} changed"),
                        None => foreign += 1,
                    }
                }
                missing += intact.keys().filter(|k| !rows.contains_key(*k)).count();
            }
        }
        std::fs::remove_file(&copy).unwrap();
        std::fs::remove_file(copy.with_file_name("flipped.redb-journal")).ok();
    }
    eprintln!(
        "{FLIPS} flips: {same} read back intact (unused bytes), {errors} errors, \
         {missing} rows missing and {foreign} rows under another id (a key byte hit)"
    );
}
