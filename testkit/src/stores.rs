//! Helpers shared by the store backends' own tests (redb, SQLite, Postgres).
