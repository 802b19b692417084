//! The schema version of a store file: stamping a new file, refusing a foreign or newer
//! one, and upgrading an older one (after keeping a copy of it).

use std::path::{Path, PathBuf};

use forge_core::{Error, Result};
use redb::{Database, ReadableDatabase, TableError};

use super::begin_durable;
use crate::error::{map, open as open_error};
use crate::schema::{
    BLOBS, BLOB_TOUCHED, FENCES, MESSAGES, META, OPEN_MESSAGES, OPEN_PARTS, PARTS, PART_MESSAGES,
    SCHEMA_VERSION, SCHEMA_VERSION_KEY, SESSIONS,
};
use crate::search;

/// Checks the schema version, or stamps it and creates the tables in a new file, whose
/// (empty) search index is kept when `search`.
///
/// A file of the current version is only read, so opening writes nothing.
pub(super) fn init_schema(db: &Database, path: &Path, search: bool) -> Result<()> {
    let txn = db.begin_read().map_err(map)?;
    let version = match txn.open_table(META) {
        Ok(meta) => meta
            .get(SCHEMA_VERSION_KEY)
            .map_err(map)?
            .map(|v| v.value()),
        Err(TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(open_error(path, e)),
    };
    match version {
        Some(SCHEMA_VERSION) => return Ok(()),
        Some(v @ (1..=5)) => {
            drop(txn);
            let kept = keep_copy(path, v)?;
            upgrade(db, v)?;
            tracing::warn!(
                file = %path.display(),
                copy = %kept.display(),
                "upgraded the file from forge-store schema version {v} to {SCHEMA_VERSION}; \
                 the file as it was is kept beside it (older releases can open the copy)"
            );
            return Ok(());
        }
        Some(v) => {
            return Err(Error::Unsupported(format!(
                "{} has forge-store schema version {v}; this release reads version \
                 {SCHEMA_VERSION} (written by a newer forge-store?)",
                path.display()
            )))
        }
        None => {}
    }
    let foreign: Vec<String> = txn
        .list_tables()
        .map_err(map)?
        .map(|h| redb::TableHandle::name(&h).to_owned())
        .collect();
    if !foreign.is_empty() {
        return Err(Error::invalid(format!(
            "{} is a redb file without a forge-store schema version (tables: {}); \
             refusing to use it",
            path.display(),
            foreign.join(", ")
        )));
    }
    drop(txn);

    let txn = begin_durable(db)?;
    {
        txn.open_table(META)
            .map_err(map)?
            .insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
            .map_err(map)?;
        txn.open_table(SESSIONS).map_err(map)?;
        txn.open_table(MESSAGES).map_err(map)?;
        txn.open_table(PARTS).map_err(map)?;
        txn.open_table(OPEN_MESSAGES).map_err(map)?;
        txn.open_table(OPEN_PARTS).map_err(map)?;
        txn.open_table(PART_MESSAGES).map_err(map)?;
        txn.open_table(FENCES).map_err(map)?;
        txn.open_table(BLOBS).map_err(map)?;
        txn.open_table(BLOB_TOUCHED).map_err(map)?;
        drop(search::Index::open(&txn)?);
        search::set_kept(&txn, search)?;
    }
    txn.commit().map_err(map)
}

/// The path of the copy [`keep_copy`] makes of a file of schema version `from`.
fn copy_path(path: &Path, from: u64) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".schema-v{from}.bak"));
    PathBuf::from(name)
}

/// Copies the file, as opened and before its upgrade, to `<file>.schema-v<from>.bak`
/// (an older release can open that copy). The file has no write of this process yet,
/// and redb keeps no state outside it, so the copy is a consistent file. A copy already
/// there (an upgrade that failed after copying) is of the same file and is kept.
///
/// From version 3 on, batches may still be only in the journal: the journal is copied
/// first, beside the copy (`<file>.schema-v<from>.bak-journal`, where that release looks
/// for the copy's journal), so the copy holds them too.
fn keep_copy(path: &Path, from: u64) -> Result<PathBuf> {
    let copy = copy_path(path, from);
    if copy.exists() {
        return Ok(copy);
    }
    let journal = crate::journal::path_for(path);
    if from >= 3 && journal.exists() {
        copy_whole(&journal, &crate::journal::path_for(&copy), path, from)?;
    }
    copy_whole(path, &copy, path, from)?;
    Ok(copy)
}

/// Copies `from_file` to `to` durably: through `<to>.partial`, synced and renamed.
fn copy_whole(from_file: &Path, to: &Path, path: &Path, from: u64) -> Result<()> {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    let partial = PathBuf::from(name);
    let made = std::fs::copy(from_file, &partial)
        .and_then(|_| std::fs::File::open(&partial)?.sync_all())
        .and_then(|()| std::fs::rename(&partial, to))
        .and_then(|()| forge_core::files::sync_dir(to));
    made.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        Error::backend(
            crate::error::BACKEND,
            false,
            std::io::Error::new(
                e.kind(),
                format!(
                    "{} needs an upgrade from schema version {from}, and the copy kept \
                     before upgrading could not be written to {}: {e}",
                    path.display(),
                    to.display()
                ),
            ),
        )
    })
}

/// Upgrades a file of schema version `from` (1 to 5) in one durable write
/// transaction: 1 → 2 builds `part_messages` from the part rows; 2 → 3 only stamps the
/// version (the journal's `meta` keys start absent: generation 0, nothing applied);
/// 3 → 4 creates the empty `fences` (no session was ever claimed); 4 → 5 the empty
/// `blobs` and `blob_touched`; 5 → 6 the empty search tables, recorded as no index
/// (`search_index` 0). The journal is replayed after the upgrade (its records of
/// version 3 on are read as they were written, and replayed without the index); with
/// `search=on` the index is then built from the part rows.
fn upgrade(db: &Database, from: u64) -> Result<()> {
    use redb::ReadableTable;
    let txn = begin_durable(db)?;
    {
        if from == 1 {
            let parts = txn.open_table(PARTS).map_err(map)?;
            let mut index = txn.open_table(PART_MESSAGES).map_err(map)?;
            for entry in parts.iter().map_err(map)? {
                let (key, _) = entry.map_err(map)?;
                let (t, s, m, p) = key.value();
                index.insert((t, s, p, m), ()).map_err(map)?;
            }
        }
        txn.open_table(FENCES).map_err(map)?;
        txn.open_table(BLOBS).map_err(map)?;
        txn.open_table(BLOB_TOUCHED).map_err(map)?;
        drop(search::Index::open(&txn)?);
        search::set_kept(&txn, false)?;
        txn.open_table(META)
            .map_err(map)?
            .insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
            .map_err(map)?;
    }
    txn.commit().map_err(map)
}
