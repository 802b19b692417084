//! Counters of what a store wrote: transactions, statements and rows.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a store has written since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteStats {
    /// Committed write transactions (one per non-empty `apply`).
    pub transactions: u64,
    /// Statements run inside them (reads of the batch's stored facts included).
    pub statements: u64,
    /// Rows inserted, updated or deleted, as the database reports them (rows removed by
    /// a cascading delete are not counted).
    pub rows: u64,
}

impl WriteStats {
    /// The difference `self - earlier`.
    #[must_use]
    pub fn since(&self, earlier: &WriteStats) -> WriteStats {
        WriteStats {
            transactions: self.transactions - earlier.transactions,
            statements: self.statements - earlier.statements,
            rows: self.rows - earlier.rows,
        }
    }
}

/// The shared counters behind [`WriteStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    transactions: AtomicU64,
    statements: AtomicU64,
    rows: AtomicU64,
}

/// What one transaction did, added to the counters when it commits.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub statements: u64,
    pub rows: u64,
}

impl Tally {
    /// Counts one statement that changed `rows` rows.
    pub fn statement(&mut self, rows: u64) {
        self.statements += 1;
        self.rows += rows;
    }
}

impl Counters {
    /// Adds a committed transaction.
    pub fn commit(&self, tally: &Tally) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.statements
            .fetch_add(tally.statements, Ordering::Relaxed);
        self.rows.fetch_add(tally.rows, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn snapshot(&self) -> WriteStats {
        WriteStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
        }
    }
}
