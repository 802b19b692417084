//! `RedbStore`: the `Store` trait over one redb file.

use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::blob::{BlobEntry, BlobId, BlobValue};
use forge_core::{
    fence, Capabilities, Claim, ClaimRequest, Cursor, Envelope, Error, Footprint, MessageId,
    MessageWithParts, OpenItems, Page, Reclaimed, Result, SearchHit, SearchKind, SearchQuery,
    SessionId, SessionPage, SessionState, Store, SyncEvent, TenantId,
};
use parking_lot::{Mutex, RwLock};
use redb::backends::FileBackend;
use redb::{Builder, Database, ReadTransaction, ReadableDatabase};

use crate::config::{Durability, RedbOptions};
use crate::counting::{CountingBackend, IoCounters};
use crate::error::{in_write, join, map, open as open_error, BACKEND};
use crate::journal::{self, Journal};
use crate::schema::{FENCES, JOURNAL_APPLIED_KEY, JOURNAL_GENERATION_KEY, JOURNAL_SIZE_KEY, META};
use crate::{read, write};

mod blobs;
mod search;
mod version;

use version::init_schema;

/// A [`Store`] in one redb file: embedded, durable, one write transaction per batch.
///
/// redb is synchronous; every call runs on tokio's blocking pool. Write transactions
/// are serialized, so concurrent `apply` calls are safe and each is atomic. Reads run on
/// a snapshot and never wait for writers.
///
/// By default a batch is made durable by the write-ahead journal next to the file
/// (`<file>-journal`, see [`RedbOptions::journal`]): committed to redb without a sync,
/// appended to the journal with one `fdatasync`, and checkpointed into the file every
/// [`RedbOptions::checkpoint_bytes`]. Opening the file replays what the journal holds
/// beyond the last checkpoint.
///
/// With [`RedbOptions::search`] on (the default), every batch also maintains the
/// full-text search index in its transaction, and [`Store::search`] answers from the
/// index without reading the history.
///
/// Fence records (`claim`, `release`) are written by write transactions too, journaled
/// like a batch: a batch checks its epochs against the records in its own transaction,
/// so every claim that returned before it committed is seen, and a claim is durable
/// when it returns (without the journal, by a durable commit whatever the durability).
pub struct RedbStore {
    /// Every use takes it shared; [`Store::reclaim`]'s compaction takes it alone. A
    /// journaled write takes the journal's lock first, then this one (so does the
    /// compaction): the order never inverts.
    db: Arc<RwLock<Database>>,
    journal: Option<Arc<Mutex<Journal>>>,
    path: PathBuf,
    options: RedbOptions,
    /// The first I/O error a write met, named again when redb later only says "a
    /// previous I/O error occurred".
    first_io: Arc<Mutex<Option<String>>>,
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store at `path` with default options, creating the file if it is
    /// missing.
    ///
    /// # Errors
    /// [`Error::Backend`] when the file cannot be opened (I/O, not a redb file, held open
    /// by another process — the latter retryable); [`Error::Unsupported`] when it was
    /// written with a newer schema version; [`Error::InvalidInput`] when it is a redb
    /// file of something else.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, RedbOptions::default())
    }

    /// Opens the store at `path` with `options`, creating the file if it is missing.
    ///
    /// This blocks on file I/O; call it at startup or inside `spawn_blocking`.
    ///
    /// # Errors
    /// As [`RedbStore::open`].
    pub fn open_with(path: impl AsRef<Path>, options: RedbOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(db) = guarded(&path, || create_whole(&path, &options))? {
            return guarded(&path, || {
                Self::from_database(db, path.clone(), options, None)
            });
        }
        check_not_empty(&path)?;
        guarded(&path, || {
            let db = create_waiting(&path, options)?;
            Self::from_database(db, path.clone(), options, None)
        })
    }

    /// Opens the store at `path` like [`RedbStore::open_with`], through a
    /// [`CountingBackend`]: the returned [`IoCounters`] count every byte redb writes to
    /// and reads from the file, and every `sync_data`, from the moment the file is opened
    /// (opening a new file already writes its header and schema).
    ///
    /// # Errors
    /// As [`RedbStore::open`].
    pub fn open_counted(
        path: impl AsRef<Path>,
        options: RedbOptions,
    ) -> Result<(Self, IoCounters)> {
        let path = path.as_ref().to_path_buf();
        check_not_empty(&path)?;
        // The same file opening as `redb::Builder::create` (a new file is created in
        // place: its header and schema are counted).
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| open_error(&path, e))?;
        forge_core::files::sync_dir(&path).map_err(|e| open_error(&path, e))?;
        let backend =
            CountingBackend::new(FileBackend::new(file).map_err(|e| open_error(&path, e))?);
        let counters = backend.counters();
        let store = guarded(&path, || {
            let db = builder(&options)
                .create_with_backend(backend)
                .map_err(|e| open_error(&path, e))?;
            Self::from_database(db, path.clone(), options, Some(counters.clone()))
        })?;
        Ok((store, counters))
    }

    /// Checks or creates the schema of the freshly opened `db` and replays its journal.
    fn from_database(
        db: Database,
        path: PathBuf,
        options: RedbOptions,
        counters: Option<IoCounters>,
    ) -> Result<Self> {
        init_schema(&db, &path, options.search)?;
        // The journal's batches are replayed as they were written: with the index when
        // the file keeps it. Only then is the index built or dropped for `search`.
        let indexed = search::is_kept(&db)?;
        let journal_path = journal::path_for(&path);
        let journal = if options.journaled() || journal_path.exists() {
            let j = recover_journal(
                &db,
                journal_path,
                options.checkpoint_bytes,
                counters,
                indexed,
            )?;
            // Without the journal, a file it once held is replayed and left behind: its
            // records are of an older generation from now on.
            options.journaled().then(|| Arc::new(Mutex::new(j)))
        } else {
            None
        };
        search::sync(&db, &path, options.search, indexed)?;
        Ok(Self {
            db: Arc::new(RwLock::new(db)),
            journal,
            path,
            options,
            first_io: Arc::default(),
        })
    }

    /// Makes every batch applied so far durable in the database file (a durable redb
    /// commit) and restarts the journal. The store does this by itself every
    /// [`RedbOptions::checkpoint_bytes`] and on [`RedbStore::close`]; without the
    /// journal it does nothing.
    ///
    /// # Errors
    /// [`Error::Backend`] when the commit fails (the journal still holds every batch).
    pub async fn checkpoint(&self) -> Result<()> {
        let Some(journal) = self.journal.clone() else {
            return Ok(());
        };
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let mut journal = journal.lock();
            checkpoint(&db.read(), &mut journal)
        })
        .await
        .map_err(join)?
    }

    /// The database file and its journal.
    fn files(&self) -> [PathBuf; 2] {
        [self.path.clone(), journal::path_for(&self.path)]
    }

    /// The file this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> RedbOptions {
        self.options
    }

    /// Closes the file: waits until the work of this store still running on tokio's
    /// blocking pool has ended, then closes the database (flushing it and releasing its
    /// lock) and returns what the close reports.
    ///
    /// An `apply` or a read whose future was dropped (a timeout, a cancelled request)
    /// runs to its end on the blocking pool and holds the database open until then.
    /// Dropping the store closes the file too, but only once that work has ended, and it
    /// ignores close errors: a process that opens the file again right away (or hands it
    /// to another process) calls `close` first, or the open may fail with a retryable
    /// "database already open". When `close` returns, every write that was still running
    /// has committed or rolled back.
    ///
    /// # Errors
    /// [`Error::Backend`] when redb fails to flush or close the file.
    pub async fn close(self) -> Result<()> {
        self.checkpoint().await?;
        let Self {
            mut db, journal, ..
        } = self;
        drop(journal);
        let db = loop {
            match Arc::try_unwrap(db) {
                Ok(db) => break db.into_inner(),
                Err(shared) => {
                    db = shared;
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        };
        tokio::task::spawn_blocking(move || db.close())
            .await
            .map_err(join)?
            .map_err(map)
    }

    /// A failed write's error, naming the file (see [`crate::error::in_write`]).
    fn write_error(&self, err: Error) -> Error {
        in_write(in_file(err, &self.path), &self.path, &self.first_io)
    }

    /// Runs a fence record write on tokio's blocking pool: through the journal like a
    /// batch, or without it as a commit of `durability`.
    async fn write_fence<T, F>(&self, durability: redb::Durability, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Written<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let journal = self.journal.clone();
        let every = self.options.checkpoint_bytes;
        tokio::task::spawn_blocking(move || match journal {
            Some(journal) => {
                let mut journal = journal.lock();
                commit_journaled(&db.read(), &mut journal, every, write)
            }
            None => commit_direct(&db.read(), durability, write),
        })
        .await
        .map_err(join)?
        .map_err(|e| self.write_error(e))
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let db = db.read();
            let txn = db.begin_read().map_err(map)?;
            f(&txn)
        })
        .await
        .map_err(join)?
        .map_err(|e| in_file(e, &self.path))
    }
}

/// How every file is opened: with `check` (the default, [`RedbOptions::check`]) redb
/// verifies the checksum of every page of the committed trees on open, so a file
/// damaged since it was written fails to open with [`Error::Corrupted`] instead of being
/// read (where redb would return whatever the damaged pages hold, or panic). The cost
/// is one read of the live pages of the file and one small commit per open.
fn builder(options: &RedbOptions) -> Builder {
    let mut b = Builder::new();
    b.set_check_integrity_on_open(options.check);
    b.set_cache_size(options.cache_bytes);
    b
}

/// Opens (or creates) the file, waiting up to `wait` for another process that has it
/// open.
fn create_waiting(path: &Path, options: RedbOptions) -> Result<Database> {
    let deadline = std::time::Instant::now() + options.wait;
    loop {
        match builder(&options).create(path) {
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            opened => {
                let db = opened.map_err(|e| open_error(path, e))?;
                // Created in place when it was missing: its name is durable with its
                // directory (a no-op cost for a file that was there).
                forge_core::files::sync_dir(path).map_err(|e| open_error(path, e))?;
                return Ok(db);
            }
        }
    }
}

/// A write transaction whose commit, when durable, is a two-phase commit: a damaged
/// newest commit is then an error on open, where a one-phase commit lets redb fall back
/// to the previous commit without a word (losing what the newest one held). Only durable
/// commits pay for it (one more `fsync`): checkpoints, schema changes and, without the
/// journal, every batch.
pub(crate) fn begin_durable(db: &Database) -> Result<redb::WriteTransaction> {
    let mut txn = db.begin_write().map_err(map)?;
    txn.set_two_phase_commit(true);
    Ok(txn)
}

/// Creates a missing store file whole: redb and the schema are set up in a file beside
/// it, which is then linked to `path` (never replacing a file that appeared there
/// meanwhile) and used from there. A process killed while it creates a store leaves no
/// file at `path`, instead of an empty or half-written one that no later open accepts;
/// what it leaves beside `path` is removed by a later open
/// ([`forge_core::files::remove_abandoned_creations`]). `None` when `path` exists (or
/// appeared meanwhile), or where hard links are not supported (some network and FUSE
/// file systems): the caller opens it in place.
fn create_whole(path: &Path, options: &RedbOptions) -> Result<Option<Database>> {
    forge_core::files::remove_abandoned_creations(path);
    if path.exists() {
        return Ok(None);
    }
    let Some(tmp) = forge_core::files::creation_path(path) else {
        return Ok(None); // redb's own error names the path
    };
    let made = builder(&RedbOptions {
        check: false,
        ..*options
    })
    .create(&tmp)
    .map_err(|e| open_error(path, e))
    .and_then(|db| init_schema(&db, path, options.search).map(|()| db));
    let linked = made.map(|db| std::fs::hard_link(&tmp, path).ok().map(|()| db));
    let _ = std::fs::remove_file(&tmp);
    let db = linked?;
    if db.is_some() {
        // The link is durable with its directory.
        forge_core::files::sync_dir(path).map_err(|e| open_error(path, e))?;
    }
    Ok(db)
}

/// A file that exists and is empty is not a store: redb would make it a new, empty one,
/// and a store whose file was cut to nothing would look like a store with no sessions.
fn check_not_empty(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => Err(Error::corrupted(
            path.display(),
            "empty file: not a forge-store redb file (cut to nothing, or a crash while it \
             was being created); remove it to start a new store there",
        )),
        _ => Ok(()),
    }
}

/// Runs `f` (redb opening the file) and turns a panic inside redb into
/// [`Error::Corrupted`] naming the file.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(in_file(crate::error::panicked(p.as_ref()), path)))
}

/// Names the file in a [`Error::Corrupted`] (which names the row already).
fn in_file(err: Error, path: &Path) -> Error {
    match err {
        Error::Corrupted {
            at,
            message,
            source,
        } => Error::Corrupted {
            at: format!("{at} in {}", path.display()),
            message,
            source,
        },
        other => other,
    }
}

/// What a write does inside its transaction: its result, and the journal record that
/// writes it again on recovery (`None`: it wrote nothing, and the transaction is
/// rolled back).
type Written<T> = Result<(T, Option<Vec<u8>>)>;

/// One journaled write (a batch, or a fence record): applied by `write` in a redb
/// transaction without a sync, its record appended to the journal and synced, then
/// committed; a checkpoint follows when the journal is long.
///
/// The journal lock is taken before the write transaction, by every writer, so journal
/// order is commit order; and what `write` reads (a fence record) is the state as of
/// this commit, which is also what the journal replays before this record.
fn commit_journaled<T>(
    db: &Database,
    journal: &mut Journal,
    checkpoint_every: u64,
    write: impl FnOnce(&redb::WriteTransaction) -> Written<T>,
) -> Result<T> {
    let mut txn = db.begin_write().map_err(map)?;
    txn.set_durability(redb::Durability::None).map_err(map)?;
    let applied = write(&txn).and_then(|(out, record)| {
        let Some(record) = record else {
            return Ok((out, None));
        };
        let at = journal.append(&record)?;
        let mark = txn.open_table(META).map_err(map).and_then(|mut meta| {
            meta.insert(JOURNAL_APPLIED_KEY, journal.tail())
                .map(drop)
                .map_err(map)
        });
        Ok((out, Some((at, mark))))
    });
    let (out, at) = match applied {
        Ok((out, None)) => {
            // Nothing to write: nothing to commit either.
            let _ = txn.abort();
            return Ok(out);
        }
        Ok((out, Some((at, Ok(()))))) => (out, at),
        Ok((_, Some((at, Err(e))))) => {
            let _ = txn.abort();
            retract(journal, at);
            return Err(e);
        }
        Err(e) => {
            // The write's error is what the caller needs; an abort failure would only
            // hide it, and a dropped transaction is rolled back anyway.
            let _ = txn.abort();
            return Err(e);
        }
    };
    if let Err(e) = txn.commit() {
        retract(journal, at);
        return Err(map(e));
    }
    if journal.len() >= checkpoint_every {
        // The write is durable in the journal whatever happens here; a failed checkpoint
        // is tried again after the next write.
        if let Err(e) = checkpoint(db, journal) {
            tracing::warn!(error = %e, "redb checkpoint failed; the journal keeps every batch");
        }
    }
    Ok(out)
}

/// One write without the journal: applied by `write` in a redb transaction committed
/// with `durability` (two-phase when durable).
fn commit_direct<T>(
    db: &Database,
    durability: redb::Durability,
    write: impl FnOnce(&redb::WriteTransaction) -> Written<T>,
) -> Result<T> {
    let mut txn = begin_durable(db)?;
    txn.set_durability(durability).map_err(map)?;
    match write(&txn) {
        Ok((out, Some(_))) => txn.commit().map(|()| out).map_err(map),
        Ok((out, None)) => {
            let _ = txn.abort();
            Ok(out)
        }
        Err(e) => {
            // The write's error is what the caller needs; an abort failure would only
            // hide it, and a dropped transaction is rolled back anyway.
            let _ = txn.abort();
            Err(e)
        }
    }
}

/// A batch inside its transaction: the fence check, then its events (maintaining the
/// search index when `search`).
fn write_batch(
    txn: &redb::WriteTransaction,
    ops: Vec<write::Prepared>,
    search: bool,
) -> Written<()> {
    write::check_fences(txn, &ops)?;
    let record = write::journal_record(&ops)?;
    write::apply(txn, ops, search)?;
    match record {
        Some(record) => Ok(((), Some(record))),
        None => Err(Error::invalid(
            "a batch with an event that failed to prepare was applied",
        )),
    }
}

/// The fence record of `(tn, sn)` as of the write transaction `txn`.
fn read_fence_in(txn: &redb::WriteTransaction, tn: &str, sn: &str) -> Result<Option<Claim>> {
    write::read_fence(&txn.open_table(FENCES).map_err(map)?, tn, sn)
}

/// Takes back the journal record of a batch that did not commit.
fn retract(journal: &mut Journal, at: u64) {
    if let Err(e) = journal.retract(at) {
        tracing::error!(
            journal = %journal.path().display(),
            error = %e,
            "could not take back the journal record of a batch that failed to commit; \
             reopening the store may apply that batch"
        );
    }
}

/// A durable redb commit that starts the next journal generation: everything applied is
/// then in the database file, and the journal's records are no longer needed.
fn checkpoint(db: &Database, journal: &mut Journal) -> Result<()> {
    let next = journal.generation() + 1;
    let txn = begin_durable(db)?;
    {
        let mut meta = txn.open_table(META).map_err(map)?;
        meta.insert(JOURNAL_GENERATION_KEY, next).map_err(map)?;
        meta.insert(JOURNAL_APPLIED_KEY, Journal::START)
            .map_err(map)?;
        meta.insert(JOURNAL_SIZE_KEY, journal.size()).map_err(map)?;
    }
    txn.commit().map_err(map)?;
    journal.restart(next);
    Ok(())
}

/// Opens the journal of `db` and applies the records the database does not hold yet
/// (maintaining the search index when `indexed`: the file keeps it), then checkpoints.
fn recover_journal(
    db: &Database,
    path: PathBuf,
    checkpoint_every: u64,
    counters: Option<IoCounters>,
    indexed: bool,
) -> Result<Journal> {
    let (generation, applied, size) = {
        let txn = db.begin_read().map_err(map)?;
        let meta = txn.open_table(META).map_err(map)?;
        let get =
            |key| -> Result<Option<u64>> { Ok(meta.get(key).map_err(map)?.map(|v| v.value())) };
        (
            get(JOURNAL_GENERATION_KEY)?.unwrap_or(0),
            get(JOURNAL_APPLIED_KEY)?,
            get(JOURNAL_SIZE_KEY)?.unwrap_or(0),
        )
    };
    let applied = applied.unwrap_or(Journal::START);
    let (mut journal, records) =
        Journal::open_checked(path, generation, size, checkpoint_every, counters)?;
    let pending: Vec<_> = records
        .into_iter()
        .filter(|(end, _)| *end > applied)
        .collect();
    if pending.is_empty() {
        if journal.size() < size {
            // The journal was missing and has been created anew: record its length, or
            // the next open would take it for a journal that was cut.
            checkpoint(db, &mut journal)?;
        }
        return Ok(journal);
    }
    let at = |end: u64| {
        format!(
            "journal {} (record ending at byte {end})",
            journal.path().display()
        )
    };
    let mut txn = db.begin_write().map_err(map)?;
    txn.set_durability(redb::Durability::None).map_err(map)?;
    for (end, payload) in &pending {
        let ops = write::from_journal_record(payload)
            .map_err(|e| Error::corrupted_with(at(*end), "its batch does not decode", e))?;
        write::apply(&txn, ops, indexed).map_err(|e| {
            Error::corrupted_with(at(*end), "its batch does not apply to the database", e)
        })?;
    }
    txn.commit().map_err(map)?;
    tracing::info!(
        journal = %journal.path().display(),
        batches = pending.len(),
        "replayed the journal's batches not yet in the database"
    );
    checkpoint(db, &mut journal)?;
    Ok(journal)
}

#[async_trait]
impl Store for RedbStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.durable = self.options.durability == Durability::Immediate;
        caps.blobs = true;
        caps.search = if self.options.search {
            SearchKind::Index
        } else {
            SearchKind::Off
        };
        caps
    }

    /// Decided by [`fence::decide`] over the record read in the claim's own write
    /// transaction (redb runs one at a time, so claims and batches are serialized), and
    /// durable when it returns whatever the store's durability: journaled like a batch,
    /// or without the journal a durable commit. A claim lost in a crash would let a
    /// later claim hand out its epoch again.
    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        request.validate()?;
        let (tenant, session, request) = (tenant.clone(), session.clone(), request.clone());
        self.write_fence(redb::Durability::Immediate, move |txn| {
            let (tn, sn) = (tenant.as_str(), session.as_str());
            let current = read_fence_in(txn, tn, sn)?;
            let claim = fence::decide(&session, current.as_ref(), &request)?;
            let record = write::put_fence(txn, tn, sn, &claim)?;
            Ok((claim, Some(record)))
        })
        .await
    }

    /// Writes the released record in one write transaction, with the store's
    /// durability (a release lost in a crash only leaves the lease to run out), and
    /// nothing at all when the epoch is not the current one.
    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        let (tenant, session) = (tenant.clone(), session.clone());
        let durability = self.options.durability.to_redb();
        self.write_fence(durability, move |txn| {
            let (tn, sn) = (tenant.as_str(), session.as_str());
            let current = read_fence_in(txn, tn, sn)?;
            match fence::released(current.as_ref(), epoch) {
                Some(released) => Ok(((), Some(write::put_fence(txn, tn, sn, &released)?))),
                None => Ok(((), None)),
            }
        })
        .await
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        let (tenant, session) = (tenant.clone(), session.clone());
        self.read(move |txn| {
            let fences = match txn.open_table(FENCES) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(map(e)),
            };
            write::read_fence(&fences, tenant.as_str(), session.as_str())
        })
        .await
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let search = self.options.search;
        let ops = write::prepare(batch, search);
        let db = Arc::clone(&self.db);
        if let Some(journal) = self.journal.clone() {
            let every = self.options.checkpoint_bytes;
            return tokio::task::spawn_blocking(move || {
                let mut journal = journal.lock();
                commit_journaled(&db.read(), &mut journal, every, |txn| {
                    write_batch(txn, ops, search)
                })
            })
            .await
            .map_err(join)?
            .map_err(|e| self.write_error(e));
        }
        let durability = self.options.durability.to_redb();
        tokio::task::spawn_blocking(move || {
            commit_direct(&db.read(), durability, |txn| write_batch(txn, ops, search))
        })
        .await
        .map_err(join)?
        .map_err(|e| self.write_error(e))
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        let (tenant, id) = (tenant.clone(), id.clone());
        self.read(move |txn| read::session(txn, &tenant, &id)).await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let tenant = tenant.clone();
        self.read(move |txn| read::sessions(txn, &tenant)).await
    }

    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        let (tenant, after) = (tenant.clone(), after.cloned());
        self.read(move |txn| read::sessions_after(txn, &tenant, after.as_ref(), limit))
            .await
    }

    async fn footprint(&self) -> Result<Footprint> {
        Footprint::of_files(&self.files())
    }

    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        self.put_blobs_in(tenant, blobs, now_ms, refresh_before_ms)
            .await
    }

    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        self.blobs_in(tenant, ids).await
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        self.blob_list_in(tenant).await
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.delete_blobs_in(tenant, ids, touched_before_ms).await
    }

    /// Checkpoints the journal into the database file (when it holds batches since the
    /// last checkpoint: a checkpoint with nothing to make durable would only move pages,
    /// which the compaction of a second `reclaim` in a row would then give back), then
    /// compacts the file (redb's `Database::compact`: live pages move to its start and
    /// the end is cut off). Every read and write of this store waits until it ends: the
    /// compaction needs the database alone.
    async fn reclaim(&self) -> Result<Reclaimed> {
        let before = Footprint::of_files(&self.files())?.total("file");
        let db = Arc::clone(&self.db);
        let journal = self.journal.clone();
        let compacted = tokio::task::spawn_blocking(move || {
            // Writers first (they take the journal before the database), then the
            // journal's batches into the file, then the database alone.
            let mut held = journal.as_ref().map(|j| j.lock());
            if let Some(journal) = held.as_deref_mut().filter(|j| j.len() > 0) {
                checkpoint(&db.read(), journal)?;
            }
            let mut db = db.write();
            let compacted = db.compact().map_err(map)?;
            drop(held);
            Ok::<_, Error>(compacted)
        })
        .await
        .map_err(join)?
        .map_err(|e| self.write_error(e))?;
        let after = Footprint::of_files(&self.files())?.total("file");
        let action = if compacted {
            "compacted"
        } else {
            "nothing to compact"
        };
        Ok(Reclaimed::new(before, after, action))
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let (tenant, session, id) = (tenant.clone(), session.clone(), id.clone());
        self.read(move |txn| read::message(txn, &tenant, &session, &id))
            .await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let (tenant, session, before) = (tenant.clone(), session.clone(), before.cloned());
        self.read(move |txn| read::messages(txn, &tenant, &session, before.as_ref(), limit))
            .await
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let (tenant, session) = (tenant.clone(), session.cloned());
        self.read(move |txn| read::open_items(txn, &tenant, session.as_ref()))
            .await
    }

    /// Answers from the search index in one read snapshot: the rarest word's postings
    /// are the candidates, every match is scored by BM25 over the tenant's statistics,
    /// and the best are read from their part rows. With `search=off`, fails with
    /// [`Error::Unsupported`].
    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.search_in(tenant, query).await
    }

    /// Checkpoints when the journal holds batches the database file lacks, so the file
    /// alone holds everything (a read-only use writes nothing). The file itself closes
    /// when the last handle is dropped ([`RedbStore::close`] waits for that).
    async fn close(&self) -> Result<()> {
        let Some(journal) = self.journal.clone() else {
            return Ok(());
        };
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let mut journal = journal.lock();
            if journal.len() == 0 {
                return Ok(());
            }
            checkpoint(&db.read(), &mut journal)
        })
        .await
        .map_err(join)?
        .map_err(|e| self.write_error(e))
    }
}
