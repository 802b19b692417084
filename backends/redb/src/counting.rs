//! `CountingBackend`: a redb storage backend that counts the I/O redb asks of it.
//!
//! redb preallocates its file, so the file's size says nothing about the bytes a commit
//! wrote; the bytes redb hands to its storage backend do.

use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// Totals of the I/O a [`CountingBackend`] passed on, at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IoCounts {
    /// Bytes handed to successful `write` calls.
    pub write_bytes: u64,
    /// Successful `write` calls.
    pub writes: u64,
    /// Successful `sync_data` calls (an fsync/fdatasync each on a file).
    pub syncs: u64,
    /// Bytes returned by successful `read` calls (reads served from redb's cache never
    /// reach the backend).
    pub read_bytes: u64,
    /// Bytes of the journal file's pages its syncs wrote: each sync counts every 4 KiB
    /// page the bytes written since the previous sync touched, since the device writes
    /// whole pages (see the crate's `journal` module).
    pub journal_write_bytes: u64,
    /// Syncs (`fdatasync`) of the journal file.
    pub journal_syncs: u64,
}

impl IoCounts {
    /// What happened between `earlier` and `self`, field by field (saturating at 0).
    #[must_use]
    pub fn since(self, earlier: IoCounts) -> IoCounts {
        IoCounts {
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            journal_write_bytes: self
                .journal_write_bytes
                .saturating_sub(earlier.journal_write_bytes),
            journal_syncs: self.journal_syncs.saturating_sub(earlier.journal_syncs),
        }
    }

    /// Bytes written to the database file and the journal.
    pub fn total_write_bytes(self) -> u64 {
        self.write_bytes.saturating_add(self.journal_write_bytes)
    }

    /// Syncs of the database file and the journal.
    pub fn total_syncs(self) -> u64 {
        self.syncs.saturating_add(self.journal_syncs)
    }
}

#[derive(Debug, Default)]
struct Counters {
    write_bytes: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    read_bytes: AtomicU64,
    journal_write_bytes: AtomicU64,
    journal_syncs: AtomicU64,
}

/// A cloneable handle on the counters of one [`CountingBackend`]; it stays readable
/// after the database is closed.
#[derive(Clone, Debug, Default)]
pub struct IoCounters(Arc<Counters>);

impl IoCounters {
    /// The totals so far. Each field is read atomically, the four of them not together:
    /// take snapshots when no transaction is committing for exact differences.
    pub fn snapshot(&self) -> IoCounts {
        IoCounts {
            write_bytes: self.0.write_bytes.load(Ordering::Relaxed),
            writes: self.0.writes.load(Ordering::Relaxed),
            syncs: self.0.syncs.load(Ordering::Relaxed),
            read_bytes: self.0.read_bytes.load(Ordering::Relaxed),
            journal_write_bytes: self.0.journal_write_bytes.load(Ordering::Relaxed),
            journal_syncs: self.0.journal_syncs.load(Ordering::Relaxed),
        }
    }

    /// Counts one journal sync that wrote `bytes` (whole pages).
    pub(crate) fn add_journal(&self, bytes: u64) {
        self.0
            .journal_write_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        self.0.journal_syncs.fetch_add(1, Ordering::Relaxed);
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// A [`StorageBackend`] that passes every call to `inner` (a [`FileBackend`] by default)
/// and counts the bytes written, `write` calls, `sync_data` calls and bytes read.
///
/// Only successful calls are counted. `set_len` (redb growing or preallocating its file,
/// which zero-fills without writing data) is not counted as written bytes. Locking is
/// passed through unchanged, so a counted database is locked like an uncounted one.
pub struct CountingBackend<B = FileBackend> {
    inner: B,
    counters: IoCounters,
}

impl<B: StorageBackend> CountingBackend<B> {
    /// Counts the I/O of `inner`, from zero.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            counters: IoCounters::default(),
        }
    }

    /// A handle on this backend's counters.
    pub fn counters(&self) -> IoCounters {
        self.counters.clone()
    }
}

impl<B: fmt::Debug> fmt::Debug for CountingBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingBackend")
            .field("inner", &self.inner)
            .field("counts", &self.counters.snapshot())
            .finish()
    }
}

impl<B: StorageBackend> StorageBackend for CountingBackend<B> {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)?;
        add(&self.counters.0.read_bytes, out.len());
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.inner.sync_data()?;
        add(&self.counters.0.syncs, 1);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.inner.write(offset, data)?;
        add(&self.counters.0.write_bytes, data.len());
        add(&self.counters.0.writes, 1);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use redb::{ReadableDatabase, TableDefinition};

    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

    #[test]
    fn counts_what_redb_writes_and_syncs() {
        let backend = CountingBackend::new(InMemoryBackend::new());
        let counters = backend.counters();
        let db = redb::Builder::new().create_with_backend(backend).unwrap();
        let before = counters.snapshot();
        let txn = db.begin_write().unwrap();
        txn.open_table(T)
            .unwrap()
            .insert(1, &[7u8; 10_000][..])
            .unwrap();
        txn.commit().unwrap();
        let after = counters.snapshot().since(before);
        assert!(after.write_bytes >= 10_000, "{after:?}");
        assert!(after.writes >= 1 && after.syncs >= 1, "{after:?}");
        assert_eq!(
            IoCounts::default().since(after),
            IoCounts::default(),
            "saturates"
        );
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(T).unwrap();
        assert_eq!(table.get(1).unwrap().unwrap().value().len(), 10_000);
    }
}
