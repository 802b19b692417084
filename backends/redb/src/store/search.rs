//! The search index at the store's level: building or dropping it when the file is
//! opened, so that it matches [`crate::RedbOptions::search`], and answering
//! [`forge_core::Store::search`] from it.

use std::path::Path;
use std::time::Instant;

use forge_core::{Error, Result, SearchHit, SearchQuery, TenantId};
use redb::{Database, ReadableDatabase};

use super::{begin_durable, RedbStore};
use crate::error::map;
use crate::search;

/// Whether the file keeps the search index.
pub(super) fn is_kept(db: &Database) -> Result<bool> {
    search::is_kept(&db.begin_read().map_err(map)?)
}

/// Makes the file's index match `want`: builds it from the part rows in one durable
/// transaction when the file has none (`indexed` false: written with `search=off` or by
/// schema version 5), drops it when `want` is false. Either is logged.
pub(super) fn sync(db: &Database, path: &Path, want: bool, indexed: bool) -> Result<()> {
    if want == indexed {
        return Ok(());
    }
    let started = Instant::now();
    let txn = begin_durable(db)?;
    if want {
        let (rows, docs) = search::build(&txn)?;
        txn.commit().map_err(map)?;
        tracing::info!(
            file = %path.display(),
            part_rows = rows,
            documents = docs,
            ms = started.elapsed().as_millis(),
            "built the search index from the part rows (search=on, the file had none)"
        );
    } else {
        search::drop_index(&txn)?;
        txn.commit().map_err(map)?;
        tracing::info!(
            file = %path.display(),
            ms = started.elapsed().as_millis(),
            "dropped the search index (search=off)"
        );
    }
    Ok(())
}

impl RedbStore {
    pub(super) async fn search_in(
        &self,
        tenant: &TenantId,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>> {
        if !self.options.search {
            return Err(Error::Unsupported(
                "search is off for this database (search=off); open it with search=on to \
                 build the index"
                    .into(),
            ));
        }
        let (tenant, query) = (tenant.clone(), query.clone());
        self.read(move |txn| search::search(txn, &tenant, &query))
            .await
    }
}
